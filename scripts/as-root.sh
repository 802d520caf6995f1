# Sourced by the CI set-up scripts: `as_root CMD...` runs CMD as root (directly, or through sudo);
# `can_be_root` says whether it can. One place for that check.
as_root_prefix=()
can_be_root() {
    if [ "$(id -u)" = 0 ]; then
        as_root_prefix=()
    elif command -v sudo >/dev/null 2>&1; then
        as_root_prefix=(sudo)
    else
        return 1
    fi
}
as_root() { "${as_root_prefix[@]}" "$@"; }
