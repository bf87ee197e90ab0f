package terrarun

// JSON is a JSON document held as it is: an output's value or type.
type JSON struct {
	// Raw is the document's JSON encoding.
	Raw []byte `json:"-"`
}

// MarshalJSON writes the document itself, as the versioned type does, so
// that the internal and versioned objects agree in JSON (internal objects
// are never decoded from JSON).
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j.Raw) == 0 {
		return []byte("null"), nil
	}
	return j.Raw, nil
}
