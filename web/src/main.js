// The web view's shell: who and where the user is, the navigation, and the
// route of the address to its page.
import { html } from 'htm/preact';
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { session as fetchSession, whoAmI } from './api.js';
import { RunPage } from './run.js';
import { RunsPage } from './runs.js';
import { Link, Refusal } from './ui.js';
import { WorkspacePage, WorkspacesPage } from './workspaces.js';
import './style.css';

function useLocation() {
  const [loc, setLoc] = useState(location.pathname + location.search);
  useEffect(() => {
    const on = () => setLoc(location.pathname + location.search);
    addEventListener('popstate', on);
    return () => removeEventListener('popstate', on);
  }, []);
  return loc;
}

function route(path, params, session) {
  let m;
  if ((m = path.match(/^\/namespaces\/([a-z0-9-]+)\/terraformruns\/([a-z0-9.-]+)$/))) return html`<${RunPage} ns=${m[1]} name=${m[2]} />`;
  if ((m = path.match(/^\/namespaces\/([a-z0-9-]+)\/terraformworkspaces\/([a-z0-9.-]+)$/))) return html`<${WorkspacePage} ns=${m[1]} name=${m[2]} />`;
  if (path === '/workspaces') return html`<${WorkspacesPage} session=${session} params=${params} />`;
  if (path === '/') return html`<${RunsPage} session=${session} params=${params} />`;
  return html`<h1>Not found</h1><p>The web view has no page at ${path}. <${Link} href="/">See the runs.</${Link}></p>`;
}

function App() {
  const loc = useLocation();
  const [session, setSession] = useState(null);
  const [user, setUser] = useState('');
  const [error, setError] = useState(null);
  useEffect(() => {
    fetchSession().then(setSession, setError);
    whoAmI().then(setUser, () => setUser(''));
  }, []);
  useEffect(() => {
    const main = document.getElementById('main');
    if (main) main.focus({ preventScroll: true });
  }, [loc]);
  const url = new URL(loc, location.origin);
  const here = url.pathname;
  return html`<header class="top">
      <nav aria-label="terrarun">
        <span class="brand">terrarun</span>
        <${Link} href="/" aria-current=${here === '/' || here.includes('/terraformruns/') ? 'page' : undefined}>Runs</${Link}>
        <${Link} href="/workspaces" aria-current=${here.startsWith('/workspaces') || here.includes('/terraformworkspaces/') ? 'page' : undefined}>Workspaces</${Link}>
      </nav>
      <span class="who">${user ? html`Signed in as <strong>${user}</strong>` : null}${session?.context ? html` · context <strong>${session.context}</strong>` : null}</span>
    </header>
    <main id="main" tabindex="-1">
      <${Refusal} error=${error} />
      ${session ? route(here, url.searchParams, session) : null}
    </main>`;
}

render(html`<${App} />`, document.getElementById('app'));
