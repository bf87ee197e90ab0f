// Command ociartifact publishes a directory as an OCI artifact the way
// `flux push artifact` does, and signs it the way `cosign sign --key`
// (cosign 2's default signature format) does, for the README's OCI example
// and its test registry (hack/registry.sh). It needs no container runtime,
// no flux and no cosign:
//
//	go run ./hack/ociartifact keygen DIR
//	    writes DIR/cosign.key (unencrypted: a test key) and DIR/cosign.pub
//	go run ./hack/ociartifact push [-insecure] [-key cosign.key] DIR HOST/REPO:TAG
//	    pushes DIR's files as one tar+gzip layer, prints the digest, and
//	    signs that digest with -key
//
// Real registries and real keys are better served by flux (or oras) and
// cosign themselves: terrarun reads what they write.
package main

import (
	"crypto"
	"crypto/elliptic"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociartifact:", err)
		os.Exit(1)
	}
}

const usage = "usage: ociartifact keygen DIR | ociartifact push [-insecure] [-key cosign.key] DIR HOST/REPO:TAG"

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%s", usage)
	}
	switch args[0] {
	case "keygen":
		if len(args) != 2 {
			return fmt.Errorf("%s", usage)
		}
		return keygen(args[1])
	case "push":
		fs := flag.NewFlagSet("push", flag.ContinueOnError)
		insecure := fs.Bool("insecure", false, "push over plain HTTP")
		key := fs.String("key", "", "sign the pushed digest with this private key (from keygen)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 2 {
			return fmt.Errorf("%s", usage)
		}
		return push(fs.Arg(0), fs.Arg(1), *key, *insecure)
	}
	return fmt.Errorf("unknown command %q; %s", args[0], usage)
}

func keygen(dir string) error {
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.SkipPassword)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cosign.key"), priv, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cosign.pub"), pub, 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s\n", filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub"))
	return nil
}

func push(dir, ref, keyFile string, insecure bool) error {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%s holds no file", dir)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	if _, err := name.NewTag(ref, opts...); err != nil || strings.LastIndex(ref, ":") < strings.LastIndex(ref, "/") {
		return fmt.Errorf("reference %q: write it as HOST/REPO:TAG, without oci://", ref)
	}
	digest, err := ocitest.Push(ref, ocitest.Artifact{Layer: ocitest.TarGz(files)}, insecure)
	if err != nil {
		return err
	}
	fmt.Println(digest)
	if keyFile == "" {
		return nil
	}
	signer, err := signature.LoadSignerVerifierFromPEMFile(keyFile, crypto.SHA256, cryptoutils.SkipPassword)
	if err != nil {
		return fmt.Errorf("loading %s: %w", keyFile, err)
	}
	repo := ref[:strings.LastIndex(ref, ":")] // the tag follows the last ':', checked above
	if err := ocitest.Sign(repo+"@"+digest, signer, insecure); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "signed %s@%s with %s\n", repo, digest, keyFile)
	return nil
}
