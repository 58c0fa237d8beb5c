// Command pairdriver is the load of relay/testdata/idle10k.sh when it
// measures pairs that have carried traffic: "pairdriver upstream" serves a
// control plane stand-in that answers 200 "ok" and prints its URL;
// "pairdriver drive PREFIX" sends one frame with an id through every pair
// under PREFIX (as a daemon does: resp opened first, then req) from 100
// workers, and checks each reply is a 200 for its own id.
package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nymphd/nymph/wirecore/frame"
	"github.com/nymphd/nymph/wirecore/wire"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "upstream" {
		upstream()
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "drive" {
		if err := drive(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "pairdriver:", err)
			os.Exit(1)
		}
		return
	}
	fmt.Fprintln(os.Stderr, "usage: pairdriver upstream | pairdriver drive PREFIX")
	os.Exit(2)
}

func upstream() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
}

func drive(prefix string) error {
	dirs, err := os.ReadDir(prefix)
	if err != nil {
		return err
	}
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(dirs) || failed.Load() != nil {
					return
				}
				if err := roundTrip(filepath.Join(prefix, dirs[i].Name()), fmt.Sprintf("d-%d", i)); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	fmt.Printf("driven_pairs=%d drive_s=%.2f\n", len(dirs), time.Since(start).Seconds())
	return nil
}

func roundTrip(dir, id string) error {
	resp, err := os.OpenFile(filepath.Join(dir, "resp.fifo"), os.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer resp.Close()
	req, err := os.OpenFile(filepath.Join(dir, "req.fifo"), os.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer req.Close()
	p, _ := (&wire.RelayRequest{Endpoint: wire.PathAck, ID: id, Body: []byte("x")}).MarshalMsg(nil)
	if _, err := req.Write(frame.Append(nil, p)); err != nil {
		return err
	}
	resp.SetReadDeadline(time.Now().Add(30 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(resp, hdr[:]); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(resp, b); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	var r wire.RelayReply
	if _, err := r.UnmarshalMsg(b); err != nil || r.ID != id || r.Status != 200 {
		return fmt.Errorf("%s: reply %+v (%v), want a 200 for %s", dir, r, err, id)
	}
	return nil
}
