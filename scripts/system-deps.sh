#!/usr/bin/env bash
# Debian packages incsync needs that PyPI cannot provide: Java for Spark, JDBC drivers for Spark's
# JDBC sources (Maven Central is not assumed reachable), Chromium for the UI end-to-end test. Installs only what is missing.
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
[ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
[ -f /usr/share/java/mariadb-java-client.jar ] || need+=(libmariadb-java)
command -v chromium >/dev/null 2>&1 || need+=(chromium)   # headless UI test of the Dagster asset page
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
  echo "incsync needs these Debian packages: ${need[*]} (run as root: apt-get install ${need[*]})" >&2
  exit 1
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "installing Debian packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
