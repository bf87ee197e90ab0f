import { defineConfig } from 'vite';

// The web view's build: hack/update-webview.sh runs it, and the Go plugin
// embeds its output (pkg/cmd/plugin/webview/dist). Names are content-hashed,
// so the same sources and lockfile build the same files.
export default defineConfig({
  base: '/',
  build: {
    outDir: '../pkg/cmd/plugin/webview/dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    sourcemap: false,
    modulePreload: { polyfill: false },
    target: 'es2022',
  },
});
