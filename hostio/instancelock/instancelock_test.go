package instancelock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// holderEnv makes the test binary a process that takes the lock and waits.
const holderEnv = "INSTANCELOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holderEnv); dir != "" {
		if _, err := Acquire(dir, "test directory", "use another"); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
		os.Stdout.WriteString("held\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSecondProcessIsRefusedWithTheHolderNamed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("holder did not start: %q %v", buf, err)
	}
	_, err = Acquire(dir, "test directory", "give it another --dir")
	var held *HeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrHeld) {
		t.Fatalf("second Acquire: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"pid " + strconv.Itoa(cmd.Process.Pid), "kill " + strconv.Itoa(cmd.Process.Pid), dir, "give it another --dir", "test directory"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	// kill -9 releases it: the kernel drops the flock with the process.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	l, err := Acquire(dir, "test directory", "")
	if err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir, "test directory", "")
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	l2.Release()
}

// A refused start that finds the holder's line not written yet (the
// holder has just taken the lock; on a loaded host the write comes a
// while later) waits for it, and names the holder.
func TestRefusalWaitsForTheHoldersLine(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	l, err := Acquire(dir, "test directory", "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	path := filepath.Join(dir, FileName)
	if err := os.Truncate(path, 0); err != nil { // as if not written yet
		t.Fatal(err)
	}
	time.AfterFunc(200*time.Millisecond, func() { os.WriteFile(path, []byte("4242 nymph daemon --config x\n"), 0o600) })
	_, err = Acquire(dir, "test directory", "")
	var held *HeldError
	if !errors.As(err, &held) || held.PID != 4242 || held.Command != "nymph daemon --config x" {
		t.Fatalf("second Acquire: %v (%+v)", err, held)
	}
}
