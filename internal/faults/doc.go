// Package faults holds tidemark's fault-injection suite (RELIABILITY.md, the
// fault matrix): the real binary against a real PostgreSQL started by
// internal/testenv, with a TCP proxy (testenv.Proxy) for network faults and
// failpoints (internal/failpoint) for "crash exactly here". After every fault
// it applies the oracle: bronze replays to the source, no duplicate position
// in bronze, the position confirmed to PostgreSQL never ahead of the bronze
// checkpoint, and `tidemark verify` exits 0. It prints a table of fault,
// injections, outcome and rows lost.
//
// The tests are behind the build tag "faults":
//
//	make faults                                             # everything, 50 crash-loop iterations
//	go test -tags faults -run Quick -v ./internal/faults/   # the CI subset, a few minutes
//
// Flags and environment: -iterations N (or TIDEMARK_FAULTS_ITERATIONS) sets the
// full crash loop's iterations; TIDEMARK_FAULTS_SEED replays a kill schedule;
// TIDEMARK_FAULTS_KEEP=dir keeps warehouses and logs for a post-mortem.
package faults
