package objectstore

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"fmt"
	"os"
	"regexp"
	"sort"

	"sigs.k8s.io/yaml"
)

// Keyring holds the keys that encrypt artifacts: each object is sealed
// with a key of its own (the data key), which the primary key wraps; the
// object's metadata names the wrapping key by its id. Rotation adds a key
// and makes it primary: objects wrapped by an older key stay readable while
// it is in the keyring.
type Keyring struct {
	primary string
	keys    map[string]cipher.AEAD
}

// keyringFile is the format of a keyring file, as mounted from a Secret:
//
//	primary: k2
//	keys:
//	  k1: <base64 of 32 random bytes>
//	  k2: <base64 of 32 random bytes>
type keyringFile struct {
	Primary string            `json:"primary"`
	Keys    map[string]string `json:"keys"`
}

var keyID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// LoadKeyring reads a keyring file.
func LoadKeyring(path string) (*Keyring, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the artifact encryption keys: %w", err)
	}
	var f keyringFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w; the file holds primary: <key id> and keys: {<key id>: <base64 of 32 bytes>}", path, err)
	}
	k, err := NewKeyring(f.Primary, f.Keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// NewKeyring returns the keyring of keys (base64 of 32 bytes, by id) whose
// key primary wraps new objects' data keys.
func NewKeyring(primary string, keys map[string]string) (*Keyring, error) {
	k := &Keyring{primary: primary, keys: map[string]cipher.AEAD{}}
	ids := make([]string, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if !keyID.MatchString(id) {
			return nil, fmt.Errorf("keys: key id %q must be letters, digits, '.', '_' or '-', at most 63", id)
		}
		raw, err := base64.StdEncoding.DecodeString(keys[id])
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("keys.%s: must be the base64 of 32 random bytes (head -c 32 /dev/urandom | base64)", id)
		}
		aead, err := newAEAD(raw)
		if err != nil {
			return nil, err
		}
		k.keys[id] = aead
	}
	if _, ok := k.keys[primary]; !ok {
		return nil, fmt.Errorf("primary: %q is not one of the keys %v", primary, ids)
	}
	return k, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
