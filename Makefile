# tidemark — build, test and demo entry points. See README.md.

GO ?= go

# The Python the tests read Iceberg tables with (PyIceberg), set up by
# scripts/setup-test-env.sh.
TIDEMARK_PYTHON ?= $(CURDIR)/.venv/bin/python
export TIDEMARK_PYTHON
# The Kafka broker's jars the transport tests start a broker from, fetched
# by scripts/setup-test-env.sh.
TIDEMARK_KAFKA_LIBS ?= $(CURDIR)/.test-cache/kafka/lib
export TIDEMARK_KAFKA_LIBS
# The S3-compatible store (SeaweedFS's weed) and the Iceberg REST catalog's
# jars the S3 tests start, built and fetched by scripts/setup-test-env.sh.
TIDEMARK_WEED ?= $(CURDIR)/.test-cache/seaweedfs/weed
TIDEMARK_ICEBERG_REST_LIBS ?= $(CURDIR)/.test-cache/iceberg-rest/lib
export TIDEMARK_WEED TIDEMARK_ICEBERG_REST_LIBS

.PHONY: build test setup demo faults soak interop

# The jars `make interop` reads with (scripts/setup-interop-env.sh fetches
# these versions: exported, so `make interop ICEBERG_VERSION=...` changes both).
ICEBERG_VERSION ?= 1.10.0
SQLITE_JDBC_VERSION ?= 3.51.1.0
# The Trino server `make interop` reads with (io.trino:trino-server, unpacked
# by scripts/setup-interop-env.sh; it needs Java 24+, which the script finds).
TRINO_VERSION ?= 476
export ICEBERG_VERSION SQLITE_JDBC_VERSION TRINO_VERSION

# What `tidemark --version` prints: VERSION (a release sets it: make build
# VERSION=v1.2.0; else git describe) and the commit, "+dirty" with
# uncommitted changes. Go stamps no commit itself in a git worktree or with
# -buildvcs=false, so the build passes both.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo +dirty)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

## build: compile bin/tidemark (tidemark --version prints VERSION and COMMIT)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/tidemark ./cmd/tidemark

## setup: install what the tests need (PostgreSQL and MariaDB binaries, .venv with PyIceberg, the Kafka broker's jars)
setup:
	bash scripts/setup-test-env.sh

## test: everything from a fresh machine: setup, vet, all tests against real servers,
## then the quick subset of the fault suite (TestQuick*, a few minutes; `make faults` runs all)
test: setup
	$(GO) vet ./...
	$(GO) vet -tags faults ./internal/faults/
	TIDEMARK_REQUIRE_PG=1 TIDEMARK_REQUIRE_MARIADB=1 TIDEMARK_REQUIRE_PYICEBERG=1 TIDEMARK_REQUIRE_KAFKA=1 TIDEMARK_REQUIRE_S3=1 TIDEMARK_REQUIRE_ICEBERG_REST=1 $(GO) test -count=1 -timeout 40m ./...
	TIDEMARK_REQUIRE_PG=1 TIDEMARK_REQUIRE_MARIADB=1 $(GO) test -tags faults -count=1 -timeout 20m -run Quick ./internal/faults/

## interop: third-party readers beyond `make test`'s PyIceberg and DuckDB:
## Apache Spark 3.5 (Iceberg's Spark runtime, JdbcCatalog on catalog.db) reads
## a whole-schema lake equal to the source (TestInteropSpark, a few minutes);
## Trino 476 (Iceberg connector, JDBC catalog on a PostgreSQL catalog) reads
## bronze, silver and gold (TestInteropTrino, about 3 minutes; docs/interop.md).
## Sets itself up: scripts/setup-interop-env.sh (pyspark into the venv, jars
## and trino-server, ~1.1 GB of downloads once, into .interop-cache/);
## `make test` does not.
INTEROP_JARS = $(CURDIR)/.interop-cache/jars
interop: setup
	bash scripts/setup-interop-env.sh
	$(GO) vet -tags interop ./internal/app/
	TIDEMARK_REQUIRE_PG=1 TIDEMARK_REQUIRE_PYICEBERG=1 \
		TIDEMARK_SPARK_JARS=$(INTEROP_JARS)/iceberg-spark-runtime-3.5_2.12-$(ICEBERG_VERSION).jar,$(INTEROP_JARS)/sqlite-jdbc-$(SQLITE_JDBC_VERSION).jar \
		TIDEMARK_TRINO_HOME=$(CURDIR)/.interop-cache/trino-server-$(TRINO_VERSION) \
		TIDEMARK_TRINO_JAVA=$$(cat $(CURDIR)/.interop-cache/trino-java-home)/bin/java \
		$(GO) test -tags interop -count=1 -timeout 30m -v -run 'TestInterop(Spark|Trino)' ./internal/app/

## soak: the footprint soak test (docs/operations.md#footprint) for 30 minutes
## (TIDEMARK_SOAK_DURATION=2h make soak for longer; `make test` runs it for 2 minutes)
soak: setup
	TIDEMARK_REQUIRE_PG=1 TIDEMARK_REQUIRE_PYICEBERG=1 TIDEMARK_SOAK_DURATION=$(or $(TIDEMARK_SOAK_DURATION),30m) \
		$(GO) test -count=1 -timeout 0 -v -run TestSoakFootprint ./internal/maintain/

## demo: throwaway PostgreSQL -> tidemark -> ./demo-lake
## (make demo SOURCE=mysql: the same on a throwaway MariaDB, scripts/demo-mysql.sh)
demo:
	bash scripts/demo.sh $(SOURCE)

## faults: the fault-injection suite (docs/reliability.md), 50 crash-loop iterations; prints the fault table
faults: setup
	TIDEMARK_REQUIRE_PG=1 TIDEMARK_REQUIRE_MARIADB=1 $(GO) test -tags faults -count=1 -timeout 60m -v ./internal/faults/ -args -iterations=$(or $(ITERATIONS),50)

## bench: tidemark against pg_recvlogical and COPY on a throwaway PostgreSQL,
## printed as a markdown table (docs/benchmarks.md). Sizes and scenarios:
## the issue's sizes by default (~20 min); a quick look:
## make bench BENCH_FLAGS="--scenarios 2 --reps 1 --snapshot-scale 5 --snapshot-wide-rows 150000"
## MySQL/MariaDB (catch-up against a bare binlog reader, snapshot against SELECT *):
## make bench BENCH_FLAGS="--source mysql --cdc-changes 100000 --snapshot-scale 5"
## Debezium 3.6.1.Final's embedded engine as a peer in scenario 1 (opt-in; needs java,
## javac 17+ and mvn; jars cached in .bench-cache/, else its row says why it was skipped):
## make bench BENCH_FLAGS="--scenarios 1 --debezium --cdc-changes 50000 --reps 1"
.PHONY: bench
bench: build
	$(GO) build -o bin/tidemark-bench ./cmd/tidemark-bench
	bin/tidemark-bench --tidemark bin/tidemark $(BENCH_FLAGS)
