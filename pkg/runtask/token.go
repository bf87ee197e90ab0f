package runtask

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// tokenPrefix starts every run task token, so that the authenticator knows
// its own tokens without a lookup, and leaves every other to the next.
const tokenPrefix = "trt_"

// NewToken returns a new access token of a call of a task of run
// namespace/name, and its hash, which is what status.tasks records.
func NewToken(namespace, name string) (token, hash string, err error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", "", fmt.Errorf("minting a run task token: %w", err)
	}
	token = tokenPrefix + namespace + "_" + name + "_" + hex.EncodeToString(secret)
	return token, HashToken(token), nil
}

// HashToken returns the hex SHA-256 of token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// parseToken returns the run a token names. Namespaces and run names never
// hold "_".
func parseToken(token string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "_")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || len(parts[2]) != 64 {
		return "", "", false
	}
	return parts[0], parts[1], true
}
