package objectstore

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// An encrypted object is its plaintext cut into segments of segmentSize
// bytes, each sealed with AES-256-GCM under the object's data key: so that a
// range of it (the last lines of a log) is read and authenticated without
// the rest. A segment's nonce is the object's base nonce with the segment's
// index in its last 8 bytes; its additional data are the object's name and
// whether it is the last segment, so that no segment can be moved, dropped
// or cut off, and no object renamed, without failing authentication. An
// empty plaintext is one empty last segment.
const (
	segmentSize = 64 << 10
	tagSize     = 16
	sealedSeg   = segmentSize + tagSize
)

// ErrTampered is the error of reading an object whose bytes fail
// authentication: they were changed in the bucket.
var ErrTampered = errors.New("the object fails authentication: its bytes were changed in the bucket")

func segmentNonce(base []byte, i uint64) []byte {
	n := make([]byte, len(base))
	copy(n, base)
	binary.BigEndian.PutUint64(n[len(n)-8:], binary.BigEndian.Uint64(n[len(n)-8:])^i)
	return n
}

func segmentAAD(name string, last bool) []byte {
	flag := byte(0)
	if last {
		flag = 1
	}
	return append([]byte(name+"\x00"), flag)
}

// plainSize is the plaintext size of an encrypted object of size sealed.
func plainSize(sealed int64) (int64, error) {
	segments := (sealed + sealedSeg - 1) / sealedSeg
	n := sealed - segments*tagSize
	if sealed < tagSize || n < 0 || (n == 0 && segments != 1) {
		return 0, fmt.Errorf("%w (an encrypted object of %d bytes cannot be)", ErrTampered, sealed)
	}
	return n, nil
}

// sealer encrypts a plaintext stream into segments as it is read.
type sealer struct {
	src  io.Reader
	aead cipher.AEAD
	base []byte
	name string
	i    uint64
	// next is the plaintext segment read ahead, to know whether the
	// current one is the last.
	next    []byte
	nextErr error
	out     []byte
	done    bool
}

func newSealer(src io.Reader, aead cipher.AEAD, base []byte, name string) *sealer {
	s := &sealer{src: src, aead: aead, base: base, name: name}
	s.next, s.nextErr = s.readSegment()
	return s
}

func (s *sealer) readSegment() ([]byte, error) {
	buf := make([]byte, segmentSize)
	n, err := io.ReadFull(s.src, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return buf[:n], err
}

func (s *sealer) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.done {
			return 0, io.EOF
		}
		if s.nextErr != nil && !errors.Is(s.nextErr, io.EOF) {
			return 0, s.nextErr
		}
		cur, last := s.next, errors.Is(s.nextErr, io.EOF)
		if !last {
			s.next, s.nextErr = s.readSegment()
			if errors.Is(s.nextErr, io.EOF) && len(s.next) == 0 {
				last = true
			}
		}
		s.out = s.aead.Seal(nil, segmentNonce(s.base, s.i), cur, segmentAAD(s.name, last))
		s.i++
		s.done = last
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// opener decrypts the sealed segments i, i+1, ... up to stop (exclusive) of
// an object whose last segment is lastIndex, as they are read from src.
type opener struct {
	src       io.Reader
	aead      cipher.AEAD
	base      []byte
	name      string
	i         uint64
	stop      uint64
	lastIndex uint64
	// skip is how many plaintext bytes of the first segment to drop, and
	// left how many to return in all (-1: to the end).
	skip int64
	left int64
	out  []byte
}

func (o *opener) Read(p []byte) (int, error) {
	for len(o.out) == 0 {
		if o.i >= o.stop || o.left == 0 {
			return 0, io.EOF
		}
		buf := make([]byte, sealedSeg)
		n, err := io.ReadFull(o.src, buf)
		if errors.Is(err, io.ErrUnexpectedEOF) || (errors.Is(err, io.EOF) && n == 0) {
			err = nil
		}
		if err != nil {
			return 0, err
		}
		plain, err := o.aead.Open(nil, segmentNonce(o.base, o.i), buf[:n], segmentAAD(o.name, o.i == o.lastIndex))
		if err != nil {
			return 0, ErrTampered
		}
		o.i++
		if o.skip > 0 {
			plain = plain[min(o.skip, int64(len(plain))):]
			o.skip = 0
		}
		if o.left >= 0 && int64(len(plain)) > o.left {
			plain = plain[:o.left]
		}
		if o.left >= 0 {
			o.left -= int64(len(plain))
		}
		o.out = plain
		if len(plain) == 0 && o.i >= o.stop {
			return 0, io.EOF
		}
	}
	n := copy(p, o.out)
	o.out = o.out[n:]
	return n, nil
}

func randomBytes(n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := rand.Read(b)
	return b, err
}
