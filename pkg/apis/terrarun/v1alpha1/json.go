package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"

	cbor "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
)

// JSON is any JSON value (a string, a number, a boolean, a list, an object),
// served and stored as itself, not as a string that holds JSON: an output's
// value or its Terraform type.
type JSON struct {
	// Raw is the value's JSON encoding.
	Raw []byte `json:"-" protobuf:"bytes,1,opt,name=raw"`
}

// MarshalJSON writes the value itself.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j.Raw) == 0 {
		return []byte("null"), nil
	}
	return j.Raw, nil
}

// UnmarshalJSON keeps the value as it is; null is no value.
func (j *JSON) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		j.Raw = nil
		return nil
	}
	if !json.Valid(data) {
		return errors.New("not a JSON value")
	}
	j.Raw = append(j.Raw[:0:0], data...)
	return nil
}

// MarshalCBOR writes the value in CBOR, for the CBOR serializer.
func (j JSON) MarshalCBOR() ([]byte, error) {
	if len(j.Raw) == 0 {
		return cbor.Marshal(nil)
	}
	var v any
	if err := json.Unmarshal(j.Raw, &v); err != nil {
		return nil, err
	}
	return cbor.Marshal(v)
}

// UnmarshalCBOR reads a value written by MarshalCBOR.
func (j *JSON) UnmarshalCBOR(data []byte) error {
	var v any
	if err := cbor.Unmarshal(data, &v); err != nil {
		return err
	}
	if v == nil {
		j.Raw = nil
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	j.Raw = raw
	return nil
}

// OpenAPISchemaType is no type: the value may be of any JSON type.
func (JSON) OpenAPISchemaType() []string { return nil }

// OpenAPISchemaFormat is no format.
func (JSON) OpenAPISchemaFormat() string { return "" }
