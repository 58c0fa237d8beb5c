// Package childpids keeps a directory of PID files, one per child the
// daemon has running, so that a daemon that died without stopping its
// children (SIGKILL, a crash, the OOM killer) finds what they left behind
// when it starts again and stops it.
//
// The parent-death signal of procgroup.Attr reaches only a group's leader:
// the shell of an exec, the entry program or docker client of a run. What
// the leader started (a `sleep` under `bash -c`, a training job under the
// entry program) stays in the leader's process group and outlives both.
// Each PID file names that group, and Reap, at the next start, stops every
// group a file names that still has members of the child's making.
//
// A file is JSON, at most MaxFileSize bytes (see Record):
//
//	{"pid":4242,"pgid":4242,"sid":4100,"start":883712,"image":"/usr/bin/bash","boot":"0d6c…"}
//
// written under a name of its own (<pid>-<start>.json) through a temporary
// file and a rename, so a reader sees it whole or not at all.
//
// It decides what identifies a child across the daemon's death, and when a
// group is still the child's. On Linux a group is the child's when the
// machine has not rebooted since (boot), the pid the file names is gone or
// is still the process that started at start (pid and start time together
// are never reused), that process still runs an image the caller owns,
// and the group's members belong to the child's session and started no
// earlier than it. A pid now held by another process means the group ended
// (a pid is not handed out while a group of that number has members), so
// nothing is signalled. It never signals a pid of 1 or less, the daemon's
// own process group, or a group its child did not lead.
//
// It does not decide where the directory lives, the grace a stopped group
// gets (Reap's ctx can shorten it), or what happens to members that outlive
// their leader while the daemon runs: the stop paths of the runners and of
// shellexec decide those, and a file is removed once its child is reaped.
//
// Other systems have neither /proc nor a parent-death signal: there a file
// records the pid alone, and Reap removes every file, logging each pid it
// cannot verify and therefore leaves running.
package childpids
