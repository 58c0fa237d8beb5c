package wire

// Arrays and maps announced longer than this are refused before anything is
// allocated for them (a count is 4 bytes; its elements would be far more).
//msgp:limit arrays:65536 maps:65536

// RelayRequest is the payload of a relay request frame. Endpoint and Body
// are the protocol of spec 000; the other keys are nymph extensions that a
// relay which does not know them ignores.
type RelayRequest struct {
	Endpoint string `msg:"endpoint"`
	// Headers carries X-LS-* headers for the upstream request; a relay
	// forwards only those and never lets a frame set Authorization.
	Headers map[string]string `msg:"headers,omitempty,allownil"`
	// ContentType overrides application/x-msgpack (raw log chunks).
	ContentType string `msg:"content_type,omitempty"`
	// ID, when set, asks for a RelayReply envelope instead of raw bytes.
	ID string `msg:"id,omitempty"`
	// Body is the already-encoded request body, forwarded verbatim. It is
	// encoded last so that a relay can stream it without holding it.
	Body []byte `msg:"body,limit=268435456"`
}

// RelayReply answers a RelayRequest that carried an ID.
type RelayReply struct {
	ID string `msg:"id"`
	// Status is the upstream HTTP status; 0 for a transport failure, 400 for
	// a refused frame, 413 for an oversize one, 503 when cut off by shutdown.
	Status     Int              `msg:"status"`
	Body       []byte           `msg:"body,limit=268435456"`
	RelayError *RelayReplyError `msg:"relay_error,omitempty"`
}

// RelayReplyError says why the relay itself failed or refused a request.
type RelayReplyError struct {
	Message string `msg:"message"`
}

// RelayErrorReply is the raw reply of a relay when the upstream failed or a
// frame was refused and the request carried no usable ID.
type RelayErrorReply struct {
	RelayError RelayFailure `msg:"relay_error"`
}

// RelayFailure is the content of a raw relay_error: Status is 0 for a
// transport error, and Body carries the upstream's bytes when there were any.
type RelayFailure struct {
	Status  Int    `msg:"status"`
	Message string `msg:"message"`
	Body    []byte `msg:"body,limit=268435456"`
}
