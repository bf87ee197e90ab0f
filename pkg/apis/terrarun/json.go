package terrarun

// JSON is a JSON document held as it is: an output's value or type.
type JSON struct {
	// Raw is the document's JSON encoding.
	Raw []byte `json:"-"`
}

// MarshalJSON writes the document itself, as the versioned type does.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j.Raw) == 0 {
		return []byte("null"), nil
	}
	return j.Raw, nil
}

// UnmarshalJSON keeps the document as it is; null is none.
func (j *JSON) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		j.Raw = nil
		return nil
	}
	j.Raw = append(j.Raw[:0:0], data...)
	return nil
}
