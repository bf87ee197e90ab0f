package tarball

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// fetchTimeout bounds one download.
const fetchTimeout = 5 * time.Minute

// Fetch downloads the tar+gzip archive at url (http or https, no
// redirect followed), no more than limits.Size bytes, checks that its
// sha256 is digest (sha256:<hex>) before a byte is unpacked, and unpacks it
// into dst, a directory that must exist and be empty. Zero members of
// limits take DefaultLimits.
func Fetch(ctx context.Context, url, digest, dst string, limits Limits) error {
	limits = limits.OrDefault()
	want, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		return fmt.Errorf("digest %q: only sha256 is supported", digest)
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
		return errors.New("the artifact server redirected; an artifact is downloaded from the URL its source reported, nowhere else")
	}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("downloading %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("downloading %s: %s", url, resp.Status)
	}
	if resp.ContentLength > limits.Size {
		return fmt.Errorf("%s is %d bytes, over the limit of %d", url, resp.ContentLength, limits.Size)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limits.Size+1))
	if err != nil {
		return fmt.Errorf("downloading %s: %w", url, err)
	}
	if int64(len(body)) > limits.Size {
		return fmt.Errorf("%s is over the limit of %d bytes", url, limits.Size)
	}
	sum := sha256.Sum256(body)
	if got := hex.EncodeToString(sum[:]); got != want {
		return &DigestError{URL: url, Want: digest, Got: "sha256:" + got}
	}
	if err := Unpack(bytes.NewReader(body), dst, limits); err != nil {
		return fmt.Errorf("unpacking %s: %w", url, err)
	}
	return nil
}

// DigestError is an archive whose content is not the digest it was
// fetched for.
type DigestError struct {
	URL, Want, Got string
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("%s has digest %s, not the %s its source reported: nothing of it was unpacked", e.URL, e.Got, e.Want)
}
