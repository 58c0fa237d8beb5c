//go:build unix

package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/nymphd/nymph/wirecore/frame"
	"golang.org/x/sys/unix"
)

// spoolSet is the spool directories being polled and the requests in
// flight. The directory map is touched only by the discovery loop; the
// in-flight set also by the goroutines serving requests.
type spoolSet struct {
	dirs     map[string]string // machine name → its resolved rel path
	mu       sync.Mutex
	inflight map[string]bool // rel + "/" + id
	wg       sync.WaitGroup
}

func (s *spoolSet) init() {
	s.dirs = map[string]string{}
	s.inflight = map[string]bool{}
}

func (s *spoolSet) add(name, rel string) { s.dirs[name] = rel }
func (s *spoolSet) remove(name string)   { delete(s.dirs, name) }
func (s *spoolSet) wait()                { s.wg.Wait() }

// claim marks a request in flight; false when it already is.
func (s *spoolSet) claim(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight[key] {
		return false
	}
	s.inflight[key] = true
	return true
}

func (s *spoolSet) release(key string) {
	s.mu.Lock()
	delete(s.inflight, key)
	s.mu.Unlock()
}

// poll lists every spool/req directory once and starts serving the
// requests not in flight yet. Polling, not inotify: a daemon on another
// host writes over NFS, which inotify never reports. Requests left from
// before a restart are found the same way.
func (s *spoolSet) poll(rl *Relay) {
	for _, rel := range s.dirs {
		ents, err := rl.root.readDir(rel + "/spool/req")
		if err != nil {
			continue // not created yet, or gone
		}
		for _, e := range ents {
			id, ok := strings.CutSuffix(e.Name(), ".frame")
			if !ok || !frame.ValidID(id) {
				continue // a .tmp being written, or a name we never answer
			}
			key := rel + "/" + id
			if !s.claim(key) {
				continue
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.release(key)
				rl.serveSpool(rel+"/spool", id)
			}()
		}
	}
}

// spoolDirs holds the fds of one request's req and resp directories,
// opened beneath the prefix; every other call names a plain file in them,
// so nothing can lead out of the prefix.
type spoolDirs struct{ req, resp int }

func (rl *Relay) openSpoolDirs(spool string) (spoolDirs, error) {
	d := spoolDirs{req: -1, resp: -1}
	var err error
	if d.req, _, err = rl.root.openChecked(spool+"/req", dirFlag|unix.O_DIRECTORY, unix.S_IFDIR, rl.cfg.AllowSharedWriters); err != nil {
		return d, err
	}
	if d.resp, _, err = rl.root.openChecked(spool+"/resp", dirFlag|unix.O_DIRECTORY, unix.S_IFDIR, rl.cfg.AllowSharedWriters); err != nil {
		unix.Close(d.req)
		return d, err
	}
	return d, nil
}

func (d spoolDirs) close() {
	unix.Close(d.req)
	unix.Close(d.resp)
}

// serveSpool answers spool/req/<id>.frame with spool/resp/<id>.frame and
// then removes the request.
func (rl *Relay) serveSpool(spool, id string) {
	dirs, err := rl.openSpoolDirs(spool)
	if err != nil {
		rl.spoolFailed(err)
		return
	}
	defer dirs.close()
	name := id + ".frame"
	var st unix.Stat_t
	if unix.Fstatat(dirs.resp, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		// Answered before a restart; only the clean-up was missing.
		_ = unix.Unlinkat(dirs.req, name, 0)
		return
	}
	rep, mode, ok := rl.answerSpoolFile(dirs, spool, id)
	if !ok {
		return
	}
	defer rep.done()
	if err := rl.writeSpoolReply(dirs, id, &rep, mode); err != nil {
		rl.spoolFailed(fmt.Errorf("relay: reply %s/resp/%s: %w", spool, name, err))
		return
	}
	if err := unix.Unlinkat(dirs.req, name, 0); errors.Is(err, unix.ENOENT) {
		// The daemon gave up and removed its request: nobody will read this.
		_ = unix.Unlinkat(dirs.resp, name, 0)
	}
}

// answerSpoolFile reads the request file and forwards it. It returns the
// reply and the file's permission bits, which the reply file gets too.
func (rl *Relay) answerSpoolFile(dirs spoolDirs, spool, id string) (reply, uint32, bool) {
	// O_NONBLOCK: a FIFO made under this name would otherwise block the
	// open until someone writes it, and with it the relay's shutdown; it
	// is refused below as not a regular file. A regular file ignores it.
	fd, err := unix.Openat(dirs.req, id+".frame", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err != unix.ENOENT { // ENOENT: the daemon gave up on it
			rl.spoolFailed(fmt.Errorf("relay: open %s/req/%s.frame: %w", spool, id, err))
		}
		return reply{}, 0, false
	}
	f := os.NewFile(uintptr(fd), path.Join(rl.root.path, spool, "req", id+".frame"))
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !rl.cfg.AllowSharedWriters && fi.Mode().Perm()&0o002 != 0 {
		rl.spoolFailed(fmt.Errorf("relay: %s: not a private regular file", f.Name()))
		return reply{}, 0, false
	}
	mode := uint32(fi.Mode().Perm() & 0o660)
	var hdr [4]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		rl.metrics.fail(errEnvelope)
		return reply{id: id, status: 400, message: "spool file shorter than a frame header", relayErr: true}, mode, true
	}
	size := int64(binary.BigEndian.Uint32(hdr[:]))
	rep, send := rl.serveFrame(rl.hard, &fileSource{rl: rl, body: frameBody{r: f, remain: size}}, size, id)
	return rep, mode, send
}

// writeSpoolReply writes resp/<id>.tmp, syncs it, and renames it to
// resp/<id>.frame, so the daemon never sees a partial reply.
func (rl *Relay) writeSpoolReply(dirs spoolDirs, id string, rep *reply, mode uint32) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	out, err := rep.appendFrame((*bp)[:0])
	if err != nil {
		return err
	}
	tmp, final := id+".tmp", id+".frame"
	// The reply is always a file made here (O_EXCL): whatever already
	// has the name (an earlier attempt's, or a FIFO whose open would
	// block) is removed first.
	if err := unix.Unlinkat(dirs.resp, tmp, 0); err != nil && err != unix.ENOENT {
		return fmt.Errorf("remove %s: %w", tmp, err)
	}
	fd, err := unix.Openat(dirs.resp, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_ = f.Chmod(fs.FileMode(mode)) // the umask would otherwise narrow it
	if _, err := f.Write(out); err != nil {
		f.Close()
		return err
	}
	if rep.stream != nil {
		// A large reply is copied through as it is read: never held whole.
		n, err := io.CopyBuffer(f, io.LimitReader(rep.stream, rep.length), (*bp)[len(out):cap(*bp)])
		if err == nil && n < rep.length {
			err = fmt.Errorf("reply body ended after %d of %d bytes", n, rep.length)
		}
		if err != nil {
			f.Close()
			unix.Unlinkat(dirs.resp, tmp, 0)
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := unix.Renameat(dirs.resp, tmp, dirs.resp, final); err != nil {
		return err
	}
	rl.metrics.replies.Add(1)
	rl.metrics.bytesOut.Add(uint64(len(out)) + uint64(rep.length))
	return nil
}

func (rl *Relay) spoolFailed(err error) {
	rl.metrics.fail(errSpool)
	rl.log.Warn("relay: spool", "err", err)
}

// frameBody reads the current frame's payload from r and never past it.
type frameBody struct {
	r      io.Reader
	remain int64 // payload bytes not read yet
}

// Read returns io.EOF once the payload is read, else what r's Read does.
func (f *frameBody) Read(b []byte) (int, error) {
	if f.remain <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > f.remain {
		b = b[:f.remain]
	}
	n, err := f.r.Read(b)
	f.remain -= int64(n)
	return n, err
}

// fileSource reads one frame's payload from a spool file.
type fileSource struct {
	rl   *Relay
	body frameBody
}

func (s *fileSource) Read(b []byte) (int, error) {
	n, err := s.body.Read(b)
	s.rl.metrics.bytesIn.Add(uint64(n))
	if err == io.EOF && s.body.remain > 0 {
		return n, errTruncated
	}
	return n, err
}

// forwarding changes nothing: a spool file is complete before it is read.
func (s *fileSource) forwarding() {}

// discard skips nothing: the file is closed after its one frame.
func (s *fileSource) discard([]byte) error { return nil }

// await waits: spool requests are independent files, so none abandons
// another; the daemon removes a request it gave up on instead.
func (s *fileSource) await(call func() result, cancel context.CancelCauseFunc, lim upstreamLimit, _ bool) (result, bool) {
	t := time.AfterFunc(time.Until(lim.until), func() {
		cancel(errNoAnswer(lim.timeout))
	})
	defer t.Stop()
	return call(), false
}
