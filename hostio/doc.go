// Package hostio holds the adapters between nymph's pure cores (wirecore)
// and the machine: one small package per kind of I/O (HTTP, FIFOs, spool
// files, processes, SQLite, files), and the loops that drive the cores.
// This package itself holds no code; this comment maps the folder.
//
// The packages decide how an effect becomes a system call, never what the
// protocol means: that is wirecore's. Which program uses each: daemon is
// `nymph daemon`, serve is `nymph serve` (the reference control plane),
// relay is `nymph relay`, ctl is `nymph ctl`, dev is `nymph dev` (which
// runs a serve and a daemon as its children), sim is `nymph sim`.
//
//   - blobcache: the daemon's content-addressed cache of downloaded
//     payloads (two-level fan-out, verified on every hit, LRU by mtime
//     under [mounts] cache_max_bytes). daemon.
//   - blobstore: serve's payload files and the presigned URLs a daemon
//     fetches and stores them through. serve.
//   - childpids: a PID file per running child, and the stop, at start, of
//     the groups a daemon killed outright left behind. daemon (shellexec,
//     the process and docker runners).
//   - daemonconfig: udf-daemon.toml, flags and environment, read once at
//     boot. daemon; dev writes a daemon's file with it.
//   - daemonloop: the daemon's driver, feeding wirecore/daemon its events
//     and carrying out its effects. daemon.
//   - fifoclient: the FIFO relay transport, the daemon's side. daemon.
//   - hostprobe: what host the daemon runs on (versions; SLURM, Kubernetes,
//     AWS, GCP or local). daemon.
//   - httpclient: the direct HTTP transport (TLS through tlsca), the
//     no-redirect rule, and the credential-free downloads of OTA binaries
//     and presigned payloads (Downloads).
//     daemon; ctl and dev through opclient.
//   - idpath: the directory name of a run, setup or exec after its id
//     (an id the wire allows but no plain file name is made one). daemon
//     (the runners' workdirs, payload staging).
//   - instancelock: one process per directory (flock), the holder named
//     in the refusal. daemon (its state directory), relay (its prefix).
//   - introspect: the daemon's loopback /status and /metrics server.
//     daemon; dev reads /status.
//   - opclient: the client of serve's operator API. ctl, dev.
//   - payload: a payload_ref resolved (presigned through the daemon's
//     transport, downloaded, verified, cached) and an exec's payload
//     staged as the file $NYMPH_PAYLOAD names. daemon.
//   - planeserver: serve's HTTP routes and the loop that owns
//     wirecore/plane. serve. Its storetest is the behaviour every Store
//     must have, run against the memory store and sqlstore.
//   - procgroup: a child as the leader of its own process group, and the
//     group's stop (SIGTERM, a grace, SIGKILL). daemon (shellexec, the
//     process and docker runners), dev.
//   - promtext: the Prometheus text format. daemon (introspect), relay.
//   - secretfile: what counts as private on disk, reading token files,
//     and replacing a private file atomically. daemon, serve, ctl, relay.
//   - signer: the daemon's host key on the wire: every request signed,
//     the key rotated, a revocation recognised. daemon (and its join).
//   - sdnotify: systemd's notify protocol (READY, STOPPING, WATCHDOG,
//     STATUS to NOTIFY_SOCKET), a no-op without it. daemon.
//   - selfupdate: an ota_update carried out: the download checked by its
//     sha256, the install beside the kept previous binary, the exec, and
//     the rollback of a new binary without a hello (its watchdog is
//     `nymph daemon ota-watch`). daemon.
//   - shellexec: one exec, `bash -c` in its own process group, with the
//     output caps and streaming. daemon.
//   - spoolclient: the spool-directory relay transport, the daemon's side.
//     daemon.
//   - simloop: a wirecore/sim run stepped on two goroutines, the fleet's
//     side and the plane's, when the run is dense enough to gain. sim.
//   - sqlstore: serve's SQLite store. serve.
//   - tlsca: serve's CA and server certificate in its data directory, and
//     the TLS configurations that verify serve: by a CA file, the system's
//     roots, or a join token's pinned fingerprint. serve; daemon, relay,
//     ctl and dev through httpclient, opclient and the relay's upstream.
//   - transport: the request, response and Transport every daemon
//     transport shares. daemon.
//
// Not here: the relay's own HTTP/1.1 client (relay/internal/inlinehttp);
// the dev stack and the terminal escaping of ctl and dev (cmd/nymph/internal:
// devstack, termtext); the relay envelope codec the two relay transports
// share, which does no I/O (wirecore/frame).
package hostio
