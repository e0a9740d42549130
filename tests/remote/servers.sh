#!/usr/bin/env bash
# The remote tests' servers, on 127.0.0.1 only: nginx (HTTP and HTTPS with a certificate made
# here by openssl; byte ranges; limit_req under /limited/ answers 503 past 5 requests a second;
# WebDAV PUT under /upload/) and s3rver (an S3 server from npm, scripts/npm_deps.sh) with the
# bucket "stoker-test". ctest runs `start` as a fixture before the remote tests and `stop` after
# them; a watchdog stops them too when the process that started them (ctest) is gone.
#
#   tests/remote/servers.sh start <state-dir>   writes <state-dir>/servers.env (ports, paths)
#   tests/remote/servers.sh stop <state-dir>
#
# STOKER_S3RVER names the s3rver program (default: .deps/npm/node_modules/.bin/s3rver).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop <state-dir>" >&2; exit 2; }

stop_servers() {
  local pid
  for f in "$dir/nginx.pid" "$dir/s3rver.pid" "$dir/watchdog.pid"; do
    [ -f "$f" ] || continue
    pid="$(cat "$f")"
    rm -f "$f"
    [ "$f" = "$dir/watchdog.pid" ] && [ "$pid" = "${STOKER_WATCHDOG_SELF:-}" ] && continue
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

case "$cmd" in
  stop)
    stop_servers
    rm -rf "$dir"
    exit 0
    ;;
  start) ;;
  *) echo "usage: $0 start|stop <state-dir>" >&2; exit 2 ;;
esac

s3rver="${STOKER_S3RVER:-$root/.deps/npm/node_modules/.bin/s3rver}"
if [ ! -x "$s3rver" ]; then
  echo "servers.sh: s3rver not found at $s3rver; install it with scripts/npm_deps.sh" >&2
  exit 1
fi
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || {
  echo "servers.sh: nginx not found; install it (Debian: apt-get install nginx)" >&2; exit 1; }
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"

[ -d "$dir" ] && stop_servers
rm -rf "$dir"
mkdir -p "$dir/www/limited" "$dir/www/upload" "$dir/s3" "$dir/nginx-temp"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>"$dir/openssl.log"

http_port="$(free_port)"
https_port="$(free_port)"
user_line=""
[ "$(id -u)" -eq 0 ] && user_line="user root;"
cat >"$dir/nginx.conf" <<CONF
$user_line
daemon on;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log warn;
events { worker_connections 512; }
http {
  # When each request began and ended, by the server's clock (cache_test.cpp reads it).
  log_format timing '\$msec \$request_time \$uri "\$http_range"';
  access_log $dir/nginx-access.log timing;
  default_type application/octet-stream;
  sendfile on;
  keepalive_requests 100000;
  client_body_temp_path $dir/nginx-temp/body;
  proxy_temp_path $dir/nginx-temp/proxy;
  fastcgi_temp_path $dir/nginx-temp/fastcgi;
  uwsgi_temp_path $dir/nginx-temp/uwsgi;
  scgi_temp_path $dir/nginx-temp/scgi;
  limit_req_zone \$binary_remote_addr zone=slow:1m rate=5r/s;
  server {
    listen 127.0.0.1:$http_port;
    root $dir/www;
    location /limited/ { limit_req zone=slow; }
    location /upload/ { dav_methods PUT; create_full_put_path on; client_max_body_size 0; }
  }
  server {
    listen 127.0.0.1:$https_port ssl;
    ssl_certificate $dir/cert.pem;
    ssl_certificate_key $dir/key.pem;
    root $dir/www;
    location /upload/ { dav_methods PUT; create_full_put_path on; client_max_body_size 0; }
  }
}
CONF
"$nginx_bin" -e "$dir/nginx-error.log" -c "$dir/nginx.conf" -p "$dir" </dev/null >/dev/null 2>&1 || {
  echo "servers.sh: nginx did not start:" >&2; cat "$dir/nginx-error.log" >&2; exit 1; }

# s3rver prints its port; --service-endpoint localhost makes <bucket>.s3.localhost a
# virtual-hosted name of the bucket. Its ListObjectsV2 continuation tokens are DES-encrypted,
# which OpenSSL 3 (node >= 17) keeps in its legacy provider.
NODE_OPTIONS="${NODE_OPTIONS:-} --openssl-legacy-provider" setsid "$s3rver" -d "$dir/s3" -a 127.0.0.1 -p 0 --configure-bucket stoker-test \
  --service-endpoint localhost --silent </dev/null >"$dir/s3rver.log" 2>&1 &
echo $! >"$dir/s3rver.pid"
s3_port=""
for _ in $(seq 300); do
  s3_port="$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$dir/s3rver.log" | head -1)"
  [ -n "$s3_port" ] && break
  kill -0 "$(cat "$dir/s3rver.pid")" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$s3_port" ]; then
  echo "servers.sh: s3rver did not start:" >&2; cat "$dir/s3rver.log" >&2
  stop_servers; exit 1
fi

cat >"$dir/servers.env" <<ENV
HTTP_PORT=$http_port
HTTPS_PORT=$https_port
S3_PORT=$s3_port
WWW=$dir/www
CA_FILE=$dir/cert.pem
BUCKET=stoker-test
ENV

# The watchdog: when the process that started the servers (ctest) is gone, stop them.
watch="${STOKER_SERVERS_WATCH_PID:-$PPID}"
setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -d "$2" ]; do sleep 2; done
  STOKER_WATCHDOG_SELF=$$ "$3" stop "$2"' watchdog "$watch" "$dir" "$0" \
  </dev/null >/dev/null 2>&1 &
echo $! >"$dir/watchdog.pid"
echo "servers.sh: nginx on 127.0.0.1:$http_port (http) and :$https_port (https), s3rver on 127.0.0.1:$s3_port"
