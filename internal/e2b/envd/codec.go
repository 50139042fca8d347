package envd

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// strictJSON is Connect's JSON codec (the one the E2B SDK speaks) refusing what connect's
// own accepts silently: a field the message does not have, and an enum value by a name it
// does not know. connect reports an Unmarshal error as invalid_argument, and protojson's
// message names the field or value ("unknown field \"extra\"").
type strictJSON struct {
	name string // "json", or "json; charset=utf-8"
}

// Name is the codec's name: the Content-Type after "application/" (unary) or
// "application/connect+" (streaming).
func (c strictJSON) Name() string { return c.name }

// Marshal encodes a proto.Message as protojson.
func (c strictJSON) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("encoding %T: not a proto.Message", v)
	}
	b, err := protojson.MarshalOptions{}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	return b, nil
}

// Unmarshal decodes protojson into a proto.Message, refusing unknown fields; an empty
// body is the empty message (as connect's codec has it).
func (c strictJSON) Unmarshal(b []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("decoding into %T: not a proto.Message", v)
	}
	if len(b) == 0 {
		proto.Reset(m)
		return nil
	}
	return protojson.UnmarshalOptions{}.Unmarshal(b, m)
}
