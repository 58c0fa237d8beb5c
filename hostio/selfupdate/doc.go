// Package selfupdate carries out an ota_update on the daemon's host: it
// downloads a new nymph binary, checks it, installs it over the running
// one and re-executes it, and it decides how a new binary that does not
// work is taken back.
//
// What it decides:
//
//   - Before anything is fetched, the update is held to the rule the
//     daemon's machine applies to the command (wire.CheckOTA): the
//     sha256 has its form (exactly 64 hex characters, wire.ValidSHA256),
//     the version and the url are not empty, and a version equal to the
//     running one is no update at all.
//   - The download is a GET with no credential of any kind, whatever its
//     origin: a release is a public artefact whose integrity comes from the
//     sha256, which arrived on the daemon's own authenticated poll. So
//     neither the bearer nor a request signature can leak to a host the
//     url names. Redirects are refused (httpclient.RefuseRedirect). The
//     control plane's CA ([server] ca_file) verifies the url only when the
//     url is on the control plane's own origin; any other host is verified
//     by the system's roots.
//   - The body streams to .nymph-ota-{pid}-{ulid}.tmp in the directory of
//     the running executable (symlinks resolved), so the install is one
//     rename(2) on one filesystem; it is hashed as it is written, bounded
//     by MaxBytes and Timeout. A mismatch, a short body or a failed write
//     removes the temporary file and leaves the running binary alone.
//   - Install: the new file gets the executable's mode | 0o111, the running
//     binary is kept beside it as NAME.previous (a hard link, so there is
//     never a moment with no binary at the path), and the new file is
//     renamed over the executable.
//   - Then the process exec()s the new binary at the same pid with the same
//     arguments and environment, plus MarkerEnv: the version it came from,
//     where the previous binary is, the deadline for its first hello and a
//     ready file.
//   - Rollback has two halves, because a binary that crashes cannot take
//     itself back. Before the exec, a watchdog is started from the previous
//     binary ("nymph daemon ota-watch"), a child that survives the exec. The
//     new binary creates the ready file on its first successful hello; the
//     watchdog then exits. A new binary that is alive but has no hello by
//     the deadline restores the previous binary itself and re-executes it
//     (same pid). A new binary that dies before its hello (a crash, exit 1,
//     a binary that is not one) is seen by the watchdog, which restores the
//     previous binary and starts it again with the original arguments, in a
//     session of its own. A re-executed previous binary is told by
//     RolledBackEnv which version was rolled back, and logs it; the control
//     plane hears it from the daemon version in its next hello, which is
//     not the target it sent.
//
// A daemon behind a relay downloads the url directly: the relay carries the
// daemon routes only. Such a host updates when it can reach the url, and
// otherwise logs the failed download and keeps running its binary.
//
// Windows can neither rename a file over a running binary nor exec(2):
// there Check refuses every update with an error that says so, before
// anything is fetched (proc_windows.go).
package selfupdate
