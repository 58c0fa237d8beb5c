#!/bin/sh
# install.sh: install nymph from a release directory or URL, made by
# `make release` (or served by `nymph serve --releases DIR`): files named
# nymph-OS-ARCH-VERSION beside a SHA256SUMS in sha256sum's format.
#
#   sh install.sh [--from DIR|URL] [--version V] [--prefix /usr/local]
#
# It picks the binary for this host (uname), downloads it into a
# temporary directory it prints and removes, checks its sha256 against
# SHA256SUMS, and only then writes PREFIX/bin/nymph (nymph.exe on
# Windows): a temporary file beside it, mode 0755, renamed over it. It
# writes nothing anywhere else. Without --version, SHA256SUMS must list a
# single version for this host.
set -eu

from=dist
version=
prefix=/usr/local

die() {
	printf 'install.sh: %s\n' "$*" >&2
	exit 1
}

usage() {
	printf 'usage: sh install.sh [--from DIR|URL] [--version V] [--prefix DIR]\n' >&2
	exit 2
}

while [ $# -gt 0 ]; do
	case $1 in
	--from) [ $# -ge 2 ] || usage; from=$2; shift 2 ;;
	--from=*) from=${1#--from=}; shift ;;
	--version) [ $# -ge 2 ] || usage; version=$2; shift 2 ;;
	--version=*) version=${1#--version=}; shift ;;
	--prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
	--prefix=*) prefix=${1#--prefix=}; shift ;;
	-h | --help) usage ;;
	*) printf 'install.sh: unknown argument %s\n' "$1" >&2; usage ;;
	esac
done

case $version in
*[!A-Za-z0-9.+_-]*) die "--version $version: letters, digits and . + _ - only" ;;
esac
[ -n "$prefix" ] || die "--prefix is empty"

case $(uname -s) in
Linux) os=linux ;;
Darwin) os=darwin ;;
MINGW* | MSYS* | CYGWIN*) os=windows ;;
*) die "no release for $(uname -s)" ;;
esac
case $(uname -m) in
x86_64 | amd64) arch=amd64 ;;
aarch64 | arm64) arch=arm64 ;;
*) die "no release for $(uname -m)" ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nymph-install.XXXXXX") || die "cannot make a temporary directory"
staged=
cleanup() {
	rm -rf "$tmp"
	if [ -n "$staged" ]; then rm -f "$staged"; fi
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM
printf 'install.sh: downloading into %s (removed at exit)\n' "$tmp"

# fetch NAME DEST copies NAME of the release into DEST.
fetch() {
	case $from in
	http://* | https://* | file://*)
		if command -v curl >/dev/null 2>&1; then
			curl -fsSL -o "$2" "${from%/}/$1" || die "download ${from%/}/$1 failed"
		elif command -v wget >/dev/null 2>&1; then
			wget -q -O "$2" "${from%/}/$1" || die "download ${from%/}/$1 failed"
		else
			die "neither curl nor wget is installed to download $from"
		fi
		;;
	*)
		[ -f "$from/$1" ] || die "$from/$1: no such file"
		cp "$from/$1" "$2" || die "copy $from/$1 failed"
		;;
	esac
}

fetch SHA256SUMS "$tmp/SHA256SUMS"

# The names this host may take, with their sums: "HASH NAME" lines.
stem=nymph-$os-$arch-
awk -v stem="$stem" -v want="$version" '
	{ name = $2; sub(/^\*/, "", name) }
	length($1) == 64 && $1 !~ /[^0-9a-f]/ && index(name, stem) == 1 && (want == "" || name == stem want) { print $1, name }
' "$tmp/SHA256SUMS" > "$tmp/candidates"

count=$(wc -l < "$tmp/candidates" | tr -d ' ')
if [ "$count" -eq 0 ]; then
	die "$from/SHA256SUMS lists no ${stem}${version:-VERSION}"
fi
if [ "$count" -gt 1 ]; then
	printf 'install.sh: %s lists several versions for %s/%s; pick one with --version:\n' "$from/SHA256SUMS" "$os" "$arch" >&2
	sed 's/^[^ ]* //' "$tmp/candidates" >&2
	exit 1
fi
read -r want name < "$tmp/candidates"

fetch "$name" "$tmp/nymph"

if command -v sha256sum >/dev/null 2>&1; then
	got=$(sha256sum "$tmp/nymph" | cut -d' ' -f1)
elif command -v shasum >/dev/null 2>&1; then
	got=$(shasum -a 256 "$tmp/nymph" | cut -d' ' -f1)
else
	die "neither sha256sum nor shasum is installed to check $name"
fi
if [ "$got" != "$want" ]; then
	die "$name: sha256 $got, but SHA256SUMS says $want; nothing installed"
fi

dest_dir=${prefix%/}/bin
dest=$dest_dir/nymph
if [ "$os" = windows ]; then dest=$dest.exe; fi
mkdir -p "$dest_dir" || die "cannot create $dest_dir"
staged=$dest_dir/.nymph-install.$$
printf 'install.sh: writing %s, then renaming it to %s\n' "$staged" "$dest"
cp "$tmp/nymph" "$staged" || die "cannot write $staged"
chmod 0755 "$staged"
mv -f "$staged" "$dest" || die "cannot replace $dest"
staged=
printf 'install.sh: installed %s (%s, sha256 %s)\n' "$dest" "$name" "$got"
