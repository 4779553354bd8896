#!/usr/bin/env bash
# setup-interop-env.sh — prepare this machine for `make interop`. Idempotent.
#
# `make interop` reads what tidemark writes with Apache Spark (Spark SQL
# through Iceberg's JdbcCatalog on tidemark's SQLite catalog) and with Trino
# (its Iceberg connector, JDBC catalog on tidemark's PostgreSQL catalog). On top of
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
#   4. Trino: io.trino:trino-server (TRINO_VERSION) from Maven Central, an
#      ~800 MB tar.gz checked against its .sha1, of which the server's lib/
#      and the Iceberg plugin (~470 MB) are kept in .interop-cache/trino-server-<v>
#      (the tar.gz is deleted once unpacked). Trino 476 needs Java 24+: a JDK
#      found at TRINO_JAVA_HOME, else /usr/lib/jvm/temurin-2[4-9]*; none is an
#      error naming what to install (Debian/Ubuntu have no such package; Adoptium's
#      Temurin 25 is one). The path is written to .interop-cache/trino-java-home.
#
# `make test` and .ci/run do not call this: Spark and Trino are only for
# `make interop`. Arguments choose the readers to prepare: `spark` (1–3),
# `trino` (4); none means both.
#
# Environment:
#   TIDEMARK_PYTHON      the venv python to install pyspark into
#   PYSPARK_SPEC         the pip requirement for pyspark (default below)
#   ICEBERG_VERSION      iceberg-spark-runtime-3.5_2.12 version (default below)
#   SQLITE_JDBC_VERSION  org.xerial:sqlite-jdbc version (default below)
#   TRINO_VERSION        io.trino:trino-server version (default below)
#   TRINO_JAVA_HOME      a Java 24+ JDK/JRE for Trino (default: found under /usr/lib/jvm)
#   MAVEN_REPO           the Maven repository to download from (default: Maven Central)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${TIDEMARK_PYTHON:-"$ROOT/.venv/bin/python"}
PYSPARK_SPEC=${PYSPARK_SPEC:-"pyspark==3.5.7"}
ICEBERG_VERSION=${ICEBERG_VERSION:-1.10.0}
SQLITE_JDBC_VERSION=${SQLITE_JDBC_VERSION:-3.51.1.0}
TRINO_VERSION=${TRINO_VERSION:-476}
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

want_reader() { case " ${READERS} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
READERS=${*:-spark trino}
for r in $READERS; do
	case $r in spark | trino) ;; *) die "unknown reader $r (want spark and/or trino)" ;; esac
done

if want_reader spark; then
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
say "Spark reads with: $PY scripts/spark_read.py --jars $JARS/iceberg-spark-runtime-3.5_2.12-$ICEBERG_VERSION.jar,$JARS/sqlite-jdbc-$SQLITE_JDBC_VERSION.jar"
fi

if want_reader trino; then
# --- 4. Trino --------------------------------------------------------------------
# java_major JAVA prints the major version of JAVA (e.g. 25), or nothing.
java_major() {
	"$1" -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print v[1]; exit}'
}
trino_java=""
for home in ${TRINO_JAVA_HOME:-} /usr/lib/jvm/temurin-2[4-9]* /usr/lib/jvm/java-2[4-9]*; do
	[ -x "$home/bin/java" ] || continue
	major=$(java_major "$home/bin/java")
	if [ -n "$major" ] && [ "$major" -ge 24 ]; then
		trino_java=$home
		break
	fi
	[ "$home" = "${TRINO_JAVA_HOME:-}" ] && die "TRINO_JAVA_HOME=$home is Java $major; Trino $TRINO_VERSION needs Java 24 or newer"
done
[ -n "$trino_java" ] || die "no Java 24+ found (TRINO_JAVA_HOME, /usr/lib/jvm/temurin-2[4-9]*): Trino $TRINO_VERSION needs one; install Adoptium Temurin 25 (https://adoptium.net/installation/linux/) or set TRINO_JAVA_HOME"
printf '%s\n' "$trino_java" > "$ROOT/.interop-cache/trino-java-home"
say "Trino's Java: $trino_java ($("$trino_java/bin/java" -version 2>&1 | head -n1))"

TRINO_HOME="$ROOT/.interop-cache/trino-server-$TRINO_VERSION"
if [ -s "$TRINO_HOME/.complete" ]; then
	say "trino-server $TRINO_VERSION: $TRINO_HOME — already unpacked"
else
	url="$MAVEN_REPO/io/trino/trino-server/$TRINO_VERSION/trino-server-$TRINO_VERSION.tar.gz"
	tgz="$ROOT/.interop-cache/trino-server-$TRINO_VERSION.tar.gz"
	want=$(curl -fsSL --retry 3 "$url.sha1" | awk '{print $1}') || die "cannot download $url.sha1"
	if [ ! -s "$tgz" ]; then
		say "trino-server $TRINO_VERSION: downloading $url (~800 MB, once)"
		curl -fsSL --retry 3 -o "$tgz.part" "$url" || { rm -f "$tgz.part"; die "cannot download $url"; }
		mv "$tgz.part" "$tgz"
	fi
	got=$(sha1sum "$tgz" | awk '{print $1}')
	[ "$got" = "$want" ] || { rm -f "$tgz"; die "$url: sha1 $got, the repository says $want"; }
	rm -rf "$TRINO_HOME" "$TRINO_HOME.part" "$TRINO_HOME.unpack"
	mkdir -p "$TRINO_HOME.unpack" "$TRINO_HOME.part/plugin"
	say "trino-server $TRINO_VERSION: unpacking (lib/ and plugin/iceberg/ are kept)"
	# Whole: the plugins' shared jars are hard links across plugin directories.
	tar -xzf "$tgz" -C "$TRINO_HOME.unpack" --strip-components=1 || die "cannot unpack $tgz"
	mv "$TRINO_HOME.unpack/lib" "$TRINO_HOME.unpack/NOTICE" "$TRINO_HOME.part/"
	mv "$TRINO_HOME.unpack/plugin/iceberg" "$TRINO_HOME.part/plugin/"
	rm -rf "$TRINO_HOME.unpack"
	printf '%s\n' "$want" > "$TRINO_HOME.part/.complete"
	mv "$TRINO_HOME.part" "$TRINO_HOME"
	rm -f "$tgz"
fi

say "Trino: $TRINO_HOME, run by $trino_java/bin/java"
fi

say "done ($READERS)"
