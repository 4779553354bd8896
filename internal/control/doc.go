// Package control is tidemark's control plane: `tidemark serve` keeps the
// pipelines a pipelines.yaml declares (organisations → projects →
// environments → pipelines) running, one supervised `tidemark run` child
// per pipeline, and calls downstream triggers exactly once.
//
// The parts, one file each:
//
//   - decl.go: the declaration, its checks (secrets by reference only,
//     keys the control plane owns) and the rendered run config, whose
//     checksum decides whether apply changes a pipeline.
//   - store.go: the state (SQLite or PostgreSQL): tokens (hashed),
//     pipelines, leases, status.
//   - supervisor.go: leases fenced by a generation; one child per pipeline
//     across every serve on one state; restarts with backoff; status from
//     the child's /metrics.
//   - trigger.go: events recorded durably before any call, delivered by
//     claim (a conditional UPDATE) with backoff; a deterministic run id
//     makes a repeated call a 409 downstream, which counts as done.
//   - api.go, client.go: the REST/JSON API, scoped by token, and its client.
//
// Tenancy: where an environment's data lands (warehouse prefix
// <data>/lake/<org>/<project>/<env>/, topic prefix, slot and publication
// names) is decided here, never by a pipeline entry.
package control
