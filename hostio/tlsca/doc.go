// Package tlsca is the TLS between nymph serve and its clients: the
// private certificate authority serve keeps in its data directory, the
// server certificate it signs, and the client configurations that verify
// a server — against a CA file, against the system roots, or against the
// CA fingerprint a join token pins.
//
// It decides the files and their modes (DIR/ca.crt 0644, ca.key 0600,
// server.crt 0644, server.key 0600, each written to a temporary name and
// renamed into place), the keys (ECDSA P-256), the lifetimes (the CA ten
// years, a server certificate 397 days, re-issued 30 days before it
// expires or when a requested host name or IP is not in it, the CA kept),
// the TLS 1.3 floor on both sides, that the server presents its CA after
// its leaf (so a host that holds only a fingerprint finds the CA in the
// chain), how a CA is fingerprinted (identity.SPKIFingerprint of its
// SubjectPublicKeyInfo), and what a failed verification tells the user.
//
// It does not decide which names a server must answer to (serve's flags
// do), where the data directory is, whether plain HTTP is allowed (serve
// allows it on loopback only), nor what a join token is
// (wirecore/identity).
package tlsca
