# Sourced by the other scripts: makes sure redis-server is installed.
# Tests start their own private servers; they only need the binary.

# Installs Debian/Ubuntu package $1 with apt-get (as root, or with sudo).
apt_install() {
    echo "$1 not found; installing it with apt-get..." >&2
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
    elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
    else
        false
    fi
}

if ! command -v redis-server >/dev/null 2>&1 && [ -z "${REDIS_SERVER_BIN:-}" ]; then
    if ! apt_install redis-server; then
        echo "cannot install redis-server here: install Redis 7 (e.g. 'apt-get install redis-server')" \
             "or set REDIS_SERVER_BIN to its path" >&2
        exit 1
    fi
fi
