package main

import "testing"

func TestReuseStrings(t *testing.T) {
	in := `		z.MachineID, bts, err = msgp.ReadStringBytes(bts)
			*z.PublicKey, bts, err = msgp.ReadStringBytes(bts)
				z.Tags[za0001], bts, err = msgp.ReadStringBytes(bts)
			za0001, bts, err = msgp.ReadStringBytes(bts)
		z.Reject.Code, bts, err = msgp.ReadStringBytes(bts)
		z.MachineID, err = dc.ReadString()
`
	want := `		z.MachineID, bts, err = reuseString(bts, z.MachineID)
			*z.PublicKey, bts, err = reuseString(bts, *z.PublicKey)
				z.Tags[za0001], bts, err = reuseString(bts, z.Tags[za0001])
			za0001, bts, err = msgp.ReadStringBytes(bts)
		z.Reject.Code, bts, err = reuseString(bts, z.Reject.Code)
		z.MachineID, err = dc.ReadString()
`
	if got := string(reuseStrings([]byte(in))); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if again := string(reuseStrings([]byte(want))); again != want {
		t.Errorf("not idempotent:\n%s", again)
	}
}
