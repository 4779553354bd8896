#!/usr/bin/env bash
# setup-interop-env.sh — prepare this machine for `make interop`. Idempotent.
#
# `make interop` reads what tidemark writes with Apache Spark (Spark SQL
# through Iceberg's JdbcCatalog on tidemark's SQLite catalog). On top of
# what scripts/setup-test-env.sh installs (PostgreSQL binaries, .venv with
# PyIceberg), this installs:
#
#   1. A Java runtime (Spark 3.5 runs on Java 8/11/17): openjdk-17-jre-headless
#      with apt-get when no `java` is on PATH (and JAVA_HOME is unset).
#   2. pyspark (PYSPARK_SPEC, 3.5.x) into the venv of TIDEMARK_PYTHON
#      (default .venv/bin/python, which setup-test-env.sh creates).
#   3. The jars Spark needs, downloaded once into .interop-cache/jars
#      (ignored by git) and checked against Maven Central's .sha1:
#        org.apache.iceberg:iceberg-spark-runtime-3.5_2.12  (Iceberg for Spark)
#        org.xerial:sqlite-jdbc                             (JdbcCatalog on catalog.db)
#
# `make test` and .ci/run do not call this: Spark is only for `make interop`.
#
# Environment:
#   TIDEMARK_PYTHON      the venv python to install pyspark into
#   PYSPARK_SPEC         the pip requirement for pyspark (default below)
#   ICEBERG_VERSION      iceberg-spark-runtime-3.5_2.12 version (default below)
#   SQLITE_JDBC_VERSION  org.xerial:sqlite-jdbc version (default below)
#   MAVEN_REPO           the Maven repository to download from (default: Maven Central)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${TIDEMARK_PYTHON:-"$ROOT/.venv/bin/python"}
PYSPARK_SPEC=${PYSPARK_SPEC:-"pyspark==3.5.7"}
ICEBERG_VERSION=${ICEBERG_VERSION:-1.10.0}
SQLITE_JDBC_VERSION=${SQLITE_JDBC_VERSION:-3.51.1.0}
MAVEN_REPO=${MAVEN_REPO:-https://repo1.maven.org/maven2}
JARS="$ROOT/.interop-cache/jars"

say() { printf 'setup-interop-env: %s\n' "$*"; }
die() { printf 'setup-interop-env: error: %s\n' "$*" >&2; exit 1; }

as_root() {
	if [ "$(id -u)" = 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root to run: $*"
	fi
}

# --- 1. Java -----------------------------------------------------------------
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
	say "Java: $JAVA_HOME ($("$JAVA_HOME/bin/java" -version 2>&1 | head -n1)) — already present"
elif command -v java >/dev/null 2>&1; then
	say "Java: $(command -v java) ($(java -version 2>&1 | head -n1)) — already present"
else
	command -v apt-get >/dev/null 2>&1 || die "no java on PATH and apt-get is unavailable; install Java 17 (or set JAVA_HOME)"
	say "Java not found: installing openjdk-17-jre-headless with apt-get"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openjdk-17-jre-headless >/dev/null
	command -v java >/dev/null 2>&1 || die "installed openjdk-17-jre-headless but java is still not on PATH"
fi

# --- 2. pyspark into the venv --------------------------------------------------
[ -x "$PY" ] || die "$PY not found: run scripts/setup-test-env.sh (make setup) first, or set TIDEMARK_PYTHON"
want=${PYSPARK_SPEC#pyspark==}
have=$("$PY" -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null || true)
if [ -n "$have" ] && { [ "$want" = "$PYSPARK_SPEC" ] || [ "$have" = "$want" ]; }; then
	say "pyspark: $have in $PY — already installed"
else
	say "pyspark: pip install $PYSPARK_SPEC into $PY (a ~300 MB download, once)"
	"$PY" -m pip install --quiet --disable-pip-version-check "$PYSPARK_SPEC"
	have=$("$PY" -c 'import pyspark; print(pyspark.__version__)') || die "pyspark installed but cannot be imported"
	say "pyspark: $have installed"
fi

# --- 3. jars -------------------------------------------------------------------
# fetch_jar GROUP ARTIFACT VERSION downloads GROUP:ARTIFACT:VERSION into
# $JARS unless it is there, verifying the repository's SHA-1.
fetch_jar() {
	local g=$1 a=$2 v=$3 f url got want
	f="$JARS/$a-$v.jar"
	if [ -s "$f" ]; then
		say "jar: $(basename "$f") — already downloaded"
		return 0
	fi
	mkdir -p "$JARS"
	url="$MAVEN_REPO/${g//.//}/$a/$v/$a-$v.jar"
	say "jar: downloading $g:$a:$v"
	curl -fsSL --retry 3 -o "$f.part" "$url" || { rm -f "$f.part"; die "cannot download $url"; }
	want=$(curl -fsSL --retry 3 "$url.sha1" | awk '{print $1}') || { rm -f "$f.part"; die "cannot download $url.sha1"; }
	got=$(sha1sum "$f.part" | awk '{print $1}')
	[ "$got" = "$want" ] || { rm -f "$f.part"; die "$url: sha1 $got, the repository says $want"; }
	mv "$f.part" "$f"
}
fetch_jar org.apache.iceberg iceberg-spark-runtime-3.5_2.12 "$ICEBERG_VERSION"
fetch_jar org.xerial sqlite-jdbc "$SQLITE_JDBC_VERSION"

say "done (Spark reads with: $PY scripts/spark_read.py --jars $JARS/iceberg-spark-runtime-3.5_2.12-$ICEBERG_VERSION.jar,$JARS/sqlite-jdbc-$SQLITE_JDBC_VERSION.jar)"
