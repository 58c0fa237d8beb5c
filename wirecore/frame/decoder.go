package frame

import "encoding/binary"

// Decoder turns bytes arriving in pieces of any size (one byte at a time
// works) into frames. Feed it what was read, then take frames out with Next
// until it reports none; at end of stream, Finish says whether a partial
// frame was left behind.
//
// The zero value is ready to use. The decoder keeps one buffer that it
// reuses, so in steady state it allocates nothing. The buffer grows only with
// bytes actually fed, never with the length a header announces, and a header
// over MaxPayload is refused as soon as its four bytes have arrived.
//
// A payload returned by Next aliases that buffer. Next never moves bytes,
// so every payload it returns stays valid until the next Feed or Reset; copy
// it to keep it longer.
type Decoder struct {
	buf []byte // unconsumed bytes are buf[off:]
	off int
	err error // sticky *TooLargeError: the stream is out of step after it
	// skip counts the bytes of an abandoned frame still to come, which
	// Feed drops; abandon marks a frame whose header is still arriving
	// as abandoned (see Abandon).
	skip    int64
	abandon bool
}

// Feed appends p to the bytes awaiting decoding. It never retains p. After
// Next has reported a *TooLargeError, Feed discards p: the stream has no
// frame boundary left to resynchronise on until Reset.
func (d *Decoder) Feed(p []byte) {
	if d.err != nil {
		return
	}
	if d.skip > 0 {
		n := min(int64(len(p)), d.skip)
		d.skip -= n
		p = p[n:]
	}
	if d.off == len(d.buf) {
		d.buf, d.off = d.buf[:0], 0
	} else if d.off > 0 && len(d.buf)+len(p) > cap(d.buf) {
		// Reclaim the consumed prefix before append grows the buffer.
		n := copy(d.buf, d.buf[d.off:])
		d.buf, d.off = d.buf[:n], 0
	}
	d.buf = append(d.buf, p...)
	if d.abandon {
		d.dropPartial()
	}
}

// Abandon drops the frame that has begun to arrive and not ended, if any,
// and the rest of its bytes as they come: it answers a request nobody
// waits for any more, and skipping it keeps the stream in step without
// holding it (a frame may be 256 MiB). A frame whose four header bytes
// have not all come is dropped once they have. Call it when Next reports
// no more frames.
func (d *Decoder) Abandon() {
	d.abandon = true
	d.dropPartial()
}

// dropPartial carries out Abandon on the frame at the front.
func (d *Decoder) dropPartial() {
	avail := d.buf[d.off:]
	switch {
	case len(avail) == 0:
		d.abandon = false
		return
	case len(avail) < HeaderSize:
		return // its length is not known yet
	}
	d.abandon = false
	n := binary.BigEndian.Uint32(avail)
	if n > MaxPayload {
		d.err = &TooLargeError{Length: uint64(n)}
		return
	}
	end := HeaderSize + int64(n)
	if int64(len(avail)) >= end {
		d.off += int(end) // it has come whole since: drop just it
		return
	}
	d.skip = end - int64(len(avail))
	d.buf, d.off = d.buf[:0], 0
}

// Compact gives up a buffer grown past limit (a rare large frame), keeping
// the bytes not consumed yet.
func (d *Decoder) Compact(limit int) {
	if cap(d.buf) <= limit {
		return
	}
	d.buf, d.off = append([]byte(nil), d.buf[d.off:]...), 0
}

// Next returns the next complete frame's payload and true, or false when
// more bytes are needed. A header over MaxPayload yields a *TooLargeError,
// and every later call returns it again until Reset.
func (d *Decoder) Next() (payload []byte, ok bool, err error) {
	if d.err != nil {
		return nil, false, d.err
	}
	avail := d.buf[d.off:]
	if len(avail) < HeaderSize {
		return nil, false, nil
	}
	n := binary.BigEndian.Uint32(avail)
	if n > MaxPayload {
		d.err = &TooLargeError{Length: uint64(n)}
		return nil, false, d.err
	}
	end := HeaderSize + int(n)
	if len(avail) < end {
		return nil, false, nil
	}
	d.off += end
	return avail[HeaderSize:end:end], true, nil
}

// Buffered returns how many fed bytes no returned frame has consumed yet.
func (d *Decoder) Buffered() int { return len(d.buf) - d.off }

// Finish reports, at end of stream, whether bytes of an incomplete frame
// remain: nil when the stream ended on a frame boundary, a *TruncatedError
// otherwise, or the sticky *TooLargeError. Call it after Next reports no
// more frames.
func (d *Decoder) Finish() error {
	if d.err != nil {
		return d.err
	}
	avail := d.buf[d.off:]
	switch {
	case len(avail) == 0:
		return nil
	case len(avail) < HeaderSize:
		return &TruncatedError{Have: len(avail), Want: HeaderSize}
	default:
		return &TruncatedError{Have: len(avail), Want: HeaderSize + int(binary.BigEndian.Uint32(avail))}
	}
}

// Reset drops buffered bytes and any sticky error, keeping the buffer's
// capacity for reuse.
func (d *Decoder) Reset() {
	d.buf, d.off, d.err, d.skip, d.abandon = d.buf[:0], 0, nil, 0, false
}
