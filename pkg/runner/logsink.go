package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// logSink feeds the stage's log stream without ever blocking the writer:
// writes are queued and sent by a goroutine. When the stream fails, it is
// opened again (the server appends); after too many failures, or when the
// server answers 403, the log is dropped. A 403 also calls onForbidden with
// the sink.
type logSink struct {
	client      Client
	stage       v1alpha1.StageName
	attempt     int32
	ctx         context.Context
	onForbidden func(*logSink, error)

	ch   chan []byte
	done chan struct{}

	mu      sync.Mutex
	closed  bool
	dropped int
	err     error // the first error, for the caller's information
}

const (
	logQueueLen    = 8192
	logMaxFailures = 5
	// logBatchBytes is how much queued output is sent as one write at most.
	logBatchBytes = 64 << 10
)

func newLogSink(ctx context.Context, client Client, stageName v1alpha1.StageName, attempt int32, onForbidden func(*logSink, error)) *logSink {
	s := &logSink{
		client:      client,
		stage:       stageName,
		attempt:     attempt,
		ctx:         ctx,
		onForbidden: onForbidden,
		ch:          make(chan []byte, logQueueLen),
		done:        make(chan struct{}),
	}
	go s.loop()
	return s
}

// Write queues p; it never fails and never blocks for long.
func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(p) == 0 {
		return len(p), nil
	}
	if s.dropped > 0 {
		marker := fmt.Appendf(nil, "\n[terrarun: %d bytes of log output were dropped]\n", s.dropped)
		select {
		case s.ch <- marker:
			s.dropped = 0
		default:
		}
	}
	select {
	case s.ch <- append([]byte(nil), p...):
	default:
		s.dropped += len(p)
	}
	return len(p), nil
}

func (s *logSink) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *logSink) loop() {
	defer close(s.done)
	var w io.WriteCloser
	failures := 0
	gaveUp := false
	fail := func(err error) {
		if errors.Is(err, ErrForbidden) {
			s.setErr(err)
			if s.onForbidden != nil {
				s.onForbidden(s, err)
			}
			gaveUp = true
			return
		}
		failures++
		if failures >= logMaxFailures || s.ctx.Err() != nil {
			s.setErr(err)
			gaveUp = true
			return
		}
		select {
		case <-time.After(time.Duration(failures) * 500 * time.Millisecond):
		case <-s.ctx.Done():
		}
	}
	for chunk := range s.ch {
		chunk = s.coalesce(chunk)
		for !gaveUp {
			if w == nil {
				var err error
				if w, err = s.client.OpenLog(s.ctx, s.stage, s.attempt); err != nil {
					w = nil
					fail(err)
					continue
				}
			}
			if _, err := w.Write(chunk); err != nil {
				// The server's answer explains the failure better than the
				// pipe's error.
				if cerr := w.Close(); cerr != nil {
					err = cerr
				}
				w = nil
				fail(err)
				continue
			}
			break
		}
	}
	if w != nil {
		if err := w.Close(); err != nil {
			s.setErr(err)
			if errors.Is(err, ErrForbidden) && s.onForbidden != nil {
				s.onForbidden(s, err)
			}
		}
	}
}

// coalesce appends to chunk what is already queued behind it, up to
// logBatchBytes, so that a burst of short lines is one write on the stream.
func (s *logSink) coalesce(chunk []byte) []byte {
	for len(chunk) < logBatchBytes {
		select {
		case more, ok := <-s.ch:
			if !ok {
				return chunk
			}
			chunk = append(chunk, more...)
		default:
			return chunk
		}
	}
	return chunk
}

// Close sends what is queued, ends the stream and waits for the server's
// answer, at most timeout; then it gives up (the caller cancels s.ctx). It
// returns the first error the stream met.
func (s *logSink) Close(timeout time.Duration) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-time.After(timeout):
		return errors.New("log stream: the server did not answer in time")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
