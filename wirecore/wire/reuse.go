package wire

import "github.com/tinylib/msgp/msgp"

// reuseString reads a msgpack str. When it equals old, old is returned and
// nothing is allocated: the generated decoders call it with the string the
// value already holds, so decoding into a reused value allocates only for
// strings that changed (see gen/codecs). Errors are msgp.ReadStringBytes's.
func reuseString(b []byte, old string) (string, []byte, error) {
	v, rest, err := msgp.ReadStringZC(b)
	if err != nil {
		return "", b, err
	}
	if string(v) == old {
		return old, rest, nil
	}
	return string(v), rest, nil
}
