#!/usr/bin/env bash
# The .deb check of the test command: cargo-deb packages the debug binary the
# test command has already built (no release/LTO build here: scripts/package.sh
# makes the release packages from the same metadata), dpkg installs it into a
# clean root (--root with chrootless maintainer scripts, which honour
# DPKG_ROOT), and the installed tree is checked: the files and their modes, the
# conffile, the ds-reaper user the postinst made from the sysusers entry, every
# unit with `systemd-analyze verify --root` (ExecStart resolved inside the
# root), and the installed binary runs `version` and `config check` on the
# installed example config. Then removal keeps the edited config.
#   scripts/check-package.sh          (after cargo build -p reaper --bins)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
target="${CARGO_TARGET_DIR:-$ROOT/target}"
# pinned: the .deb of a dev-profile binary is only warned about by this version
CARGO_DEB_VERSION=3.8.0

fails=0
ok() { echo "   ok: $*"; }
fail() { echo "   FAIL: $*" >&2; fails=$((fails + 1)); }

if ! cargo deb --version 2>/dev/null | grep -qF "$CARGO_DEB_VERSION"; then
    echo "== installing cargo-deb $CARGO_DEB_VERSION"
    cargo install cargo-deb --locked --version "$CARGO_DEB_VERSION"
fi
for tool in dpkg dpkg-deb; do
    command -v "$tool" >/dev/null || { echo "$tool is needed (Debian: dpkg)" >&2; exit 1; }
done
[ -x "$target/debug/ds-reaper" ] || { echo "no $target/debug/ds-reaper: build it first" >&2; exit 1; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cargo deb -p reaper --no-build --profile dev --fast -o "$TMP/" 2>&1 |
    grep -v -e 'dev profile is not supported' -e 'To enable debug symbols' || true
deb=$(ls "$TMP"/ds-reaper_*.deb)
ok "cargo deb: $(basename "$deb") ($(du -h "$deb" | cut -f1))"

R="$TMP/root"
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates"
: >"$R/var/lib/dpkg/status"
dpk() { dpkg --root="$R" --force-script-chrootless --force-not-root --log=/dev/null "$@"; }
# libc6 is not in the empty root: the dependency alone is let through
if out=$(dpk --force-depends -i "$deb" 2>&1); then
    ok "dpkg -i into an empty root"
else
    fail "dpkg -i:"; echo "$out" >&2
fi

# files, modes
check_file() { # path mode
    local p="$R$1"
    if [ ! -f "$p" ]; then fail "$1 not installed"; return; fi
    local m; m=$(stat -c %a "$p")
    [ "$m" = "$2" ] && ok "$1 ($m)" || fail "$1 has mode $m, want $2"
}
check_file /usr/bin/ds-reaper 755
check_file /etc/ds-reaper/config.toml 640
check_file /usr/lib/sysusers.d/ds-reaper.conf 644
check_file /usr/share/doc/ds-reaper/README.md 644
check_file /usr/share/doc/ds-reaper/config.example.toml 644
cmp -s config.example.toml "$R/etc/ds-reaper/config.toml" || fail "installed config differs from config.example.toml"
units=()
for u in deploy/systemd/*.service; do
    check_file "/usr/lib/systemd/system/$(basename "$u")" 644
    units+=("$(basename "$u")")
done
dpk -s ds-reaper | grep -q '^ /etc/ds-reaper/config.toml ' && ok "config.toml is a conffile" ||
    fail "/etc/ds-reaper/config.toml is not a conffile"
grep -q '^ds-reaper:' "$R/etc/passwd" 2>/dev/null && ok "postinst made the ds-reaper user (sysusers)" ||
    fail "no ds-reaper user in the root's /etc/passwd"

# units, against the installed tree: systemd's own units come from the host
if command -v systemd-analyze >/dev/null && [ -d /usr/lib/systemd/system ]; then
    cp -an /usr/lib/systemd/system/. "$R/usr/lib/systemd/system/"
    for u in "${units[@]}"; do
        # exit 0 on unknown directives, which it only prints: any line naming the unit fails
        if out=$(cd "$TMP" && systemd-analyze verify --root="$R" --man=no "$R/usr/lib/systemd/system/$u" 2>&1) &&
            ! grep -q "$u" <<<"$out"; then
            ok "systemd-analyze verify --root $u"
        else
            fail "systemd-analyze verify $u:"; echo "$out" >&2
        fi
    done
elif [ "${CI:-}" = true ]; then
    fail "systemd-analyze not installed (deploy/dev/services.sh installs systemd)"
else
    echo "   skip: systemd-analyze not installed"
fi

# the installed binary
bin="$R/usr/bin/ds-reaper"
if out=$("$bin" version 2>&1) && grep -q '^ds-reaper ' <<<"$out"; then
    ok "installed ds-reaper version: $(head -1 <<<"$out")"
else
    fail "installed ds-reaper version:"; echo "$out" >&2
fi
if out=$("$bin" --config "$R/etc/ds-reaper/config.toml" config check 2>&1); then
    ok "installed ds-reaper config check on the installed example: $(tail -1 <<<"$out")"
else
    fail "installed ds-reaper config check:"; echo "$out" >&2
fi

# removal keeps an edited conffile, purge takes it
echo "# edited" >>"$R/etc/ds-reaper/config.toml"
dpk -r ds-reaper >/dev/null 2>&1 || fail "dpkg -r"
[ ! -e "$R/usr/bin/ds-reaper" ] && [ -f "$R/etc/ds-reaper/config.toml" ] &&
    ok "dpkg -r removes the binary, keeps the config" || fail "dpkg -r: binary left or config gone"
dpk -P ds-reaper >/dev/null 2>&1 || fail "dpkg -P"
[ ! -e "$R/etc/ds-reaper/config.toml" ] && ok "dpkg -P removes the config" || fail "dpkg -P left the config"

if [ "$fails" -ne 0 ]; then
    echo "package check: $fails failure(s)" >&2
    exit 1
fi
echo "package check: all ok"
