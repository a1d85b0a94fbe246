# Shared by scripts/setup.sh and scripts/test.sh: install the Debian 12 packages
# Lazarus needs to build and test, but only those that are missing.
# POSIX sh; source it with `. scripts/deps.sh`, then call `lz_install_deps`.

# Build: compiler, make, libc headers, xxHash, zstd, lz4; the remote store's
# libcurl (OpenSSL flavour), libcrypto, libxml2, and pkg-config to find them;
# libfuse3 and fusermount3 (fuse3) for the file system front end (fs/, run --fs).
# Tests: python3 with pytest, setpriv (util-linux), ps/pgrep (procps), mkfs.xfs
# (xfsprogs: the reflink test and bench loop-mount an XFS image), filefrag (e2fsprogs),
# a Slurm of one node for tests/test_slurm.py and bench/slurm.py (slurmctld slurmd
# slurm-client munge; their services are not started: the tests start the daemons).
# Man pages: scdoc turns man/*.scd into roff (`make man`, `make install`); man-db
# and groff-base render them (tests/test_install.py).
LZ_DEB_PACKAGES="gcc make pkg-config libc6-dev libxxhash-dev libzstd-dev liblz4-dev libcurl4-openssl-dev libssl-dev libxml2-dev fuse3 libfuse3-dev python3 python3-pytest util-linux procps fio xfsprogs e2fsprogs slurmctld slurmd slurm-client munge scdoc man-db groff-base"

lz_pkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

lz_install_deps() {
    if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
        echo "deps: not a Debian system (no dpkg/apt-get); install by hand: $LZ_DEB_PACKAGES" >&2
        return 0
    fi
    missing=""
    for p in $LZ_DEB_PACKAGES; do
        lz_pkg_installed "$p" || missing="$missing $p"
    done
    if [ -z "$missing" ]; then
        echo "deps: all packages present" >&2
        return 0
    fi
    if [ "$(id -u)" -eq 0 ]; then
        sudo=""
    elif command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "deps: missing:$missing; run as root or install sudo" >&2
        return 1
    fi
    echo "deps: installing:$missing" >&2
    # shellcheck disable=SC2086  # word splitting of the package list is intended
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
}

# The remote store's tests run a real S3 server, versitygw (tests/s3server.py):
# built with Go's own tool if it is not there (about 3 minutes; Debian 12's Go
# is too old for it, so a Go of 1.21 or later must be on PATH or in
# /usr/local/go).  Without either, those tests are skipped and say why.
LZ_VERSITYGW="github.com/versity/versitygw/cmd/versitygw@v1.8.0"
lz_install_versitygw() {
    if command -v versitygw >/dev/null 2>&1 || [ -x "$HOME/go/bin/versitygw" ]; then
        return 0
    fi
    go=$(command -v go || echo /usr/local/go/bin/go)
    if [ ! -x "$go" ]; then
        echo "deps: no Go toolchain: versitygw not installed, the remote-store tests will be skipped" >&2
        return 0
    fi
    echo "deps: go install $LZ_VERSITYGW" >&2
    "$go" install "$LZ_VERSITYGW" || echo "deps: versitygw could not be built; the remote-store tests will be skipped" >&2
}

# What setup.sh and test.sh both start with: the packages, then the build.
lz_install_and_build() {
    lz_install_deps
    echo "$ make -j2"
    make -j2
}
