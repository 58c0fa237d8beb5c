//go:build unix

package testkit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Exited reports whether pid has ended (see WaitExited).
func Exited(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return os.IsNotExist(err)
	}
	// The state follows the command name, which is in parentheses and
	// may itself hold spaces or parentheses.
	rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
	fields := strings.Fields(rest)
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}
