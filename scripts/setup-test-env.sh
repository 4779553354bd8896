#!/usr/bin/env bash
# setup-test-env.sh — prepare this machine for `make test`. Idempotent.
#
#   1. PostgreSQL server binaries (initdb, pg_ctl, postgres): installed with
#      apt-get when none can be found. The tests start their own throwaway
#      servers (internal/testenv); no system cluster is created or started.
#   2. The OS user "postgres" (the tests run the server as that user when
#      they run as root).
#   3. A Python venv at .venv with PyIceberg, and DuckDB with its avro,
#      iceberg and delta extensions from PyPI wheels (duckdb-ext-avro,
#      duckdb-ext-iceberg, duckdb-ext-delta: no download at run time), which
#      the tests use to read the Iceberg and Delta tables tidemark writes
#      (found through TIDEMARK_PYTHON), and deltalake (delta-rs), which reads
#      the Delta tables.
#   4. MariaDB server binaries (mariadb-install-db, mariadbd): installed with
#      apt-get (mariadb-server) when mariadbd is neither on PATH nor in
#      /usr/sbin. The tests start their own throwaway servers; the system
#      service the package sets up is stopped and disabled.
#   5. The Apache Kafka broker's jars (org.apache.kafka:kafka_2.13 and its
#      dependencies, from Maven Central with mvn) in .test-cache/kafka/lib:
#      internal/testenv starts a real KRaft broker from them.
#   6. SeaweedFS's weed binary (the S3-compatible object store the S3 tests
#      write to), built from the Go module github.com/seaweedfs/seaweedfs
#      into .test-cache/seaweedfs/weed (a few minutes, once per version).
#   7. Apache Iceberg's reference REST catalog server (iceberg-open-api's
#      test fixtures, iceberg-core, iceberg-aws with the AWS SDK's S3
#      client, Jetty, sqlite-jdbc; from Maven Central with mvn) in
#      .test-cache/iceberg-rest/lib, and its loopback launcher
#      (internal/testenv/icebergrest) compiled into .test-cache/iceberg-rest/classes.
#
# Environment:
#   TIDEMARK_PG_BIN      use the PostgreSQL binaries in this directory
#   PYTHON               the python3 to create the venv with (default: python3)
#   PYICEBERG_SPEC       the pip requirement for PyIceberg (default below)
#   DUCKDB_SPECS         the pip requirements for DuckDB (default below)
#   DELTALAKE_SPEC       the pip requirement for deltalake (default below)
#   KAFKA_VERSION        the Kafka broker version (default 4.4.0)
#   SEAWEEDFS_VERSION    the github.com/seaweedfs/seaweedfs module version
#   ICEBERG_REST_VERSION the Iceberg version of the REST catalog (default 1.10.1)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
# Pinned so every machine reads the lake with the same PyIceberg.
PYICEBERG_SPEC=${PYICEBERG_SPEC:-"pyiceberg[sql-sqlite,pyarrow]==0.12.0"}
# DuckDB and the extension wheels built for exactly that version (pytz:
# DuckDB's Python client needs it to fetch a timestamptz).
DUCKDB_SPECS=${DUCKDB_SPECS:-"duckdb==1.4.4 duckdb-ext-avro==1.4.4.20260205 duckdb-ext-iceberg==1.4.4.20260205 duckdb-ext-delta==1.4.4.20260205 pytz"}
# delta-rs's Python binding, which reads the Delta tables internal/lake/delta writes.
DELTALAKE_SPEC=${DELTALAKE_SPEC:-"deltalake==1.6.6"}
# The Kafka broker the transport tests run (its jars from Maven Central).
KAFKA_VERSION=${KAFKA_VERSION:-4.4.0}
# The S3-compatible store and the Iceberg REST catalog of the S3 tests.
SEAWEEDFS_VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
ICEBERG_REST_VERSION=${ICEBERG_REST_VERSION:-1.10.1}

say() { printf 'setup-test-env: %s\n' "$*"; }
die() { printf 'setup-test-env: error: %s\n' "$*" >&2; exit 1; }

# as_root runs a command as root (directly, or through sudo when available).
as_root() {
	if [ "$(id -u)" = 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root to run: $*"
	fi
}

# apt_install installs Debian packages without prompting.
apt_install() {
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

# pg_bindir prints the directory holding initdb, following the same order as
# internal/testenv.BinDir, or fails.
pg_bindir() {
	local d
	if [ -n "${TIDEMARK_PG_BIN:-}" ]; then
		[ -x "$TIDEMARK_PG_BIN/initdb" ] && { echo "$TIDEMARK_PG_BIN"; return 0; }
		return 1
	fi
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir 2>/dev/null || true)
		[ -n "$d" ] && [ -x "$d/initdb" ] && { echo "$d"; return 0; }
	fi
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5n | tail -n1 || true)
	[ -n "$d" ] && [ -x "$d/initdb" ] && { echo "$d"; return 0; }
	if command -v initdb >/dev/null 2>&1; then
		d=$(dirname "$(readlink -f "$(command -v initdb)")")
		echo "$d"
		return 0
	fi
	return 1
}

# --- 1. PostgreSQL server binaries ------------------------------------------
if bindir=$(pg_bindir); then
	say "PostgreSQL binaries: $bindir ($("$bindir/postgres" --version)) — already present"
else
	[ -z "${TIDEMARK_PG_BIN:-}" ] || die "TIDEMARK_PG_BIN=$TIDEMARK_PG_BIN has no initdb"
	command -v apt-get >/dev/null 2>&1 ||
		die "PostgreSQL server binaries not found and apt-get is unavailable; install PostgreSQL (>= 14) and set TIDEMARK_PG_BIN to its bin directory"
	say "PostgreSQL binaries not found: installing the postgresql package with apt-get"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
	# Like the official postgres Docker image: install postgresql-common first
	# and tell it not to create (and start) a system cluster on port 5432.
	apt_install postgresql-common
	if [ -f /etc/postgresql-common/createcluster.conf ]; then
		as_root sed -ri 's/^#?\s*(create_main_cluster)\s*=.*$/\1 = false/' /etc/postgresql-common/createcluster.conf
	fi
	apt_install postgresql
	bindir=$(pg_bindir) || die "installed postgresql but still cannot find initdb"
	say "installed PostgreSQL: $bindir ($("$bindir/postgres" --version))"
fi

# --- 2. OS user postgres (needed only when tests run as root) ---------------
if [ "$(id -u)" = 0 ]; then
	if id postgres >/dev/null 2>&1; then
		say "OS user postgres: present"
	else
		useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
		say "OS user postgres: created"
	fi
fi

# --- 3. Python venv with PyIceberg -------------------------------------------
venv_ok() {
	[ -x "$VENV/bin/python" ] &&
		"$VENV/bin/python" -c 'import pyiceberg, pyarrow, sqlalchemy; from pyiceberg.catalog.sql import SqlCatalog' >/dev/null 2>&1
}

# duckdb_ok reports whether the venv's DuckDB loads avro, iceberg and delta
# from the extension wheels' directory.
duckdb_ok() {
	"$VENV/bin/python" - >/dev/null 2>&1 <<'PY'
import os, duckdb, duckdb_ext, pytz
d = next(os.path.join(p, "extensions") for p in duckdb_ext.__path__ if os.path.isdir(os.path.join(p, "extensions")))
con = duckdb.connect()
con.execute("SET autoinstall_known_extensions = false")
con.execute("SET extension_directory = ?", [d])
con.execute("LOAD avro")
con.execute("LOAD iceberg")
con.execute("LOAD delta")
PY
}

if venv_ok; then
	say "Python venv: $VENV — pyiceberg $("$VENV/bin/python" -c 'import pyiceberg; print(pyiceberg.__version__)') already installed"
else
	if [ -e "$VENV" ] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
		say "Python venv: $VENV is broken, recreating it"
		rm -rf "$VENV"
	fi
	if [ ! -x "$VENV/bin/python" ]; then
		py=${PYTHON:-python3}
		command -v "$py" >/dev/null 2>&1 || die "$py not found; install Python >= 3.9 (or set PYTHON)"
		"$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' ||
			die "$py is $("$py" --version 2>&1); PyIceberg needs Python >= 3.9"
		say "Python venv: creating $VENV with $("$py" --version 2>&1)"
		if ! "$py" -m venv "$VENV"; then
			rm -rf "$VENV"
			command -v apt-get >/dev/null 2>&1 || die "'$py -m venv' failed; install the venv module for $py"
			say "'$py -m venv' failed: installing python3-venv with apt-get"
			apt_install python3-venv
			"$py" -m venv "$VENV"
		fi
	fi
	say "Python venv: pip install $PYICEBERG_SPEC"
	"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PYICEBERG_SPEC"
	venv_ok || die "pyiceberg installed into $VENV but cannot be imported"
	say "Python venv: pyiceberg $("$VENV/bin/python" -c 'import pyiceberg; print(pyiceberg.__version__)') installed"
fi

if duckdb_ok; then
	say "Python venv: duckdb $("$VENV/bin/python" -c 'import duckdb; print(duckdb.__version__)') with avro and iceberg — already installed"
else
	say "Python venv: pip install $DUCKDB_SPECS"
	# shellcheck disable=SC2086 # a list of requirements
	"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $DUCKDB_SPECS
	duckdb_ok || die "duckdb installed into $VENV but cannot load its avro and iceberg extensions"
	say "Python venv: duckdb $("$VENV/bin/python" -c 'import duckdb; print(duckdb.__version__)') with avro and iceberg installed"
fi

if "$VENV/bin/python" -c 'import deltalake, pyarrow' >/dev/null 2>&1; then
	say "Python venv: deltalake $("$VENV/bin/python" -c 'import deltalake; print(deltalake.__version__)') — already installed"
else
	say "Python venv: pip install $DELTALAKE_SPEC"
	"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$DELTALAKE_SPEC"
	"$VENV/bin/python" -c 'import deltalake' || die "deltalake installed into $VENV but cannot be imported"
fi

# --- 4. MariaDB server binaries -----------------------------------------------
mariadbd_path() {
	if [ -n "${TIDEMARK_MARIADB_BIN:-}" ]; then
		[ -x "$TIDEMARK_MARIADB_BIN/mariadbd" ] && { echo "$TIDEMARK_MARIADB_BIN/mariadbd"; return 0; }
		return 1
	fi
	command -v mariadbd 2>/dev/null && return 0
	[ -x /usr/sbin/mariadbd ] && { echo /usr/sbin/mariadbd; return 0; }
	return 1
}

if mdb=$(mariadbd_path); then
	say "MariaDB binaries: $mdb ($("$mdb" --version 2>/dev/null | head -n1)) — already present"
else
	[ -z "${TIDEMARK_MARIADB_BIN:-}" ] || die "TIDEMARK_MARIADB_BIN=$TIDEMARK_MARIADB_BIN has no mariadbd"
	command -v apt-get >/dev/null 2>&1 ||
		die "MariaDB server binaries not found and apt-get is unavailable; install MariaDB (>= 10.5) and set TIDEMARK_MARIADB_BIN to the directory holding mariadbd"
	say "MariaDB binaries not found: installing the mariadb-server package with apt-get"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
	# policy-rc.d exit 101 keeps the package from starting a system server.
	rcd=/usr/sbin/policy-rc.d
	made_rcd=
	if [ ! -e "$rcd" ]; then
		printf '#!/bin/sh\nexit 101\n' | as_root tee "$rcd" >/dev/null
		as_root chmod 755 "$rcd"
		made_rcd=1
	fi
	apt_install mariadb-server >/dev/null
	[ -z "$made_rcd" ] || as_root rm -f "$rcd"
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		as_root systemctl disable --now mariadb >/dev/null 2>&1 || true
	fi
	mdb=$(mariadbd_path) || die "installed mariadb-server but still cannot find mariadbd"
	say "installed MariaDB: $mdb ($("$mdb" --version 2>/dev/null | head -n1))"
fi
id mysql >/dev/null 2>&1 || die "OS user mysql is missing (the mariadb-server package creates it)"

# --- 5. Apache Kafka broker jars (Maven Central) ------------------------------
# internal/testenv starts a real KRaft broker from these (java -cp 'lib/*'
# kafka.Kafka); the transport tests produce to and consume from it.
KAFKA_DIR="$ROOT/.test-cache/kafka"
if ls "$KAFKA_DIR"/lib/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1; then
	say "Kafka $KAFKA_VERSION jars: $KAFKA_DIR/lib — already present"
else
	command -v java >/dev/null 2>&1 || apt_install default-jre-headless >/dev/null
	command -v mvn >/dev/null 2>&1 || apt_install maven >/dev/null
	mkdir -p "$KAFKA_DIR"
	cat >"$KAFKA_DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>tidemark</groupId><artifactId>test-kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
  </dependencies>
</project>
POM
	say "fetching the Kafka $KAFKA_VERSION broker's jars from Maven Central"
	rm -rf "$KAFKA_DIR/lib"
	(cd "$KAFKA_DIR" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$KAFKA_DIR/lib") ||
		die "could not fetch org.apache.kafka:kafka_2.13:$KAFKA_VERSION with mvn"
	say "Kafka $KAFKA_VERSION jars: $KAFKA_DIR/lib ($(ls "$KAFKA_DIR/lib" | wc -l) jars)"
fi

# --- 6. SeaweedFS (S3-compatible object store) ---------------------------------
# internal/testenv starts `weed server -s3` from this binary.
WEED_DIR="$ROOT/.test-cache/seaweedfs"
if [ -x "$WEED_DIR/weed" ] && [ "$(cat "$WEED_DIR/version" 2>/dev/null)" = "$SEAWEEDFS_VERSION" ]; then
	say "SeaweedFS $SEAWEEDFS_VERSION: $WEED_DIR/weed — already built"
else
	command -v go >/dev/null 2>&1 || die "go not found: it builds SeaweedFS's weed binary"
	say "building SeaweedFS's weed ($SEAWEEDFS_VERSION) from the Go module proxy (a few minutes, once)"
	src=$(go mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -n "$src" ] && [ -d "$src/weed" ] || die "could not download github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION"
	mkdir -p "$WEED_DIR"
	# Built inside the module (its go.mod has replace directives, which
	# `go install pkg@version` refuses).
	(cd "$src" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags="-s -w" -o "$WEED_DIR/weed.new" ./weed) ||
		die "could not build SeaweedFS's weed"
	mv "$WEED_DIR/weed.new" "$WEED_DIR/weed"
	echo "$SEAWEEDFS_VERSION" >"$WEED_DIR/version"
	say "SeaweedFS: $WEED_DIR/weed built"
fi

# --- 7. Iceberg REST catalog (Maven Central) -----------------------------------
REST_DIR="$ROOT/.test-cache/iceberg-rest"
REST_LAUNCHER="$ROOT/internal/testenv/icebergrest/LoopbackRESTCatalogServer.java"
rest_ok() {
	ls "$REST_DIR"/lib/iceberg-open-api-"$ICEBERG_REST_VERSION"-test-fixtures.jar >/dev/null 2>&1 &&
		[ "$REST_DIR/classes/org/apache/iceberg/rest/LoopbackRESTCatalogServer.class" -nt "$REST_LAUNCHER" ]
}
if rest_ok; then
	say "Iceberg REST catalog $ICEBERG_REST_VERSION: $REST_DIR — already present"
else
	command -v mvn >/dev/null 2>&1 || apt_install maven >/dev/null
	command -v javac >/dev/null 2>&1 || apt_install default-jdk-headless >/dev/null
	mkdir -p "$REST_DIR"
	# The fixture's own dependencies are test-scoped in its pom: the server's
	# classpath is named here. hadoop-common only for its Configuration
	# class (CatalogUtil wants one), without its dependency tree.
	cat >"$REST_DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>tidemark</groupId><artifactId>test-iceberg-rest</artifactId><version>1</version>
  <properties><iceberg.version>$ICEBERG_REST_VERSION</iceberg.version><aws.version>2.33.0</aws.version><jetty.version>11.0.25</jetty.version></properties>
  <dependencies>
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-open-api</artifactId><version>\${iceberg.version}</version><classifier>test-fixtures</classifier></dependency>
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-core</artifactId><version>\${iceberg.version}</version></dependency>
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-core</artifactId><version>\${iceberg.version}</version><classifier>tests</classifier></dependency>
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-aws</artifactId><version>\${iceberg.version}</version></dependency>
    <dependency><groupId>software.amazon.awssdk</groupId><artifactId>s3</artifactId><version>\${aws.version}</version></dependency>
    <dependency><groupId>software.amazon.awssdk</groupId><artifactId>sts</artifactId><version>\${aws.version}</version></dependency>
    <dependency><groupId>software.amazon.awssdk</groupId><artifactId>kms</artifactId><version>\${aws.version}</version></dependency>
    <dependency><groupId>software.amazon.awssdk</groupId><artifactId>url-connection-client</artifactId><version>\${aws.version}</version></dependency>
    <dependency><groupId>software.amazon.awssdk</groupId><artifactId>apache-client</artifactId><version>\${aws.version}</version></dependency>
    <dependency><groupId>org.xerial</groupId><artifactId>sqlite-jdbc</artifactId><version>3.50.3.0</version></dependency>
    <dependency><groupId>org.eclipse.jetty</groupId><artifactId>jetty-server</artifactId><version>\${jetty.version}</version></dependency>
    <dependency><groupId>org.eclipse.jetty</groupId><artifactId>jetty-servlet</artifactId><version>\${jetty.version}</version></dependency>
    <dependency><groupId>org.eclipse.jetty</groupId><artifactId>jetty-util</artifactId><version>\${jetty.version}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>2.0.17</version></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-common</artifactId><version>3.4.1</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>
    <dependency><groupId>org.apache.hadoop.thirdparty</groupId><artifactId>hadoop-shaded-guava</artifactId><version>1.3.0</version></dependency>
    <dependency><groupId>com.fasterxml.woodstox</groupId><artifactId>woodstox-core</artifactId><version>5.4.0</version></dependency>
    <dependency><groupId>commons-logging</groupId><artifactId>commons-logging</artifactId><version>1.2</version></dependency>
    <dependency><groupId>commons-collections</groupId><artifactId>commons-collections</artifactId><version>3.2.2</version></dependency>
    <dependency><groupId>org.apache.commons</groupId><artifactId>commons-configuration2</artifactId><version>2.10.1</version></dependency>
  </dependencies>
</project>
POM
	say "fetching the Iceberg $ICEBERG_REST_VERSION REST catalog's jars from Maven Central"
	rm -rf "$REST_DIR/lib" "$REST_DIR/classes"
	(cd "$REST_DIR" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$REST_DIR/lib") ||
		die "could not fetch org.apache.iceberg:iceberg-open-api:$ICEBERG_REST_VERSION:test-fixtures with mvn"
	mkdir -p "$REST_DIR/classes"
	javac -nowarn -d "$REST_DIR/classes" -cp "$REST_DIR/lib/*" "$REST_LAUNCHER" ||
		die "could not compile $REST_LAUNCHER"
	say "Iceberg REST catalog: $REST_DIR ($(ls "$REST_DIR/lib" | wc -l) jars)"
fi

# PyIceberg reads S3 tables through pyarrow's S3 filesystem (in its wheel)
# and REST catalogs through its own client: nothing more to install.
"$VENV/bin/python" -c 'from pyarrow.fs import S3FileSystem; from pyiceberg.catalog.rest import RestCatalog' >/dev/null 2>&1 ||
	die "the venv's pyarrow has no S3 filesystem or pyiceberg no REST catalog"

say "done (tests use TIDEMARK_PYTHON=$VENV/bin/python, TIDEMARK_KAFKA_LIBS=$KAFKA_DIR/lib, TIDEMARK_WEED=$WEED_DIR/weed, TIDEMARK_ICEBERG_REST_LIBS=$REST_DIR/lib)"
