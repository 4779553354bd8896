package control

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL state store
	"github.com/uptrace/bun/driver/sqliteshim"

	"github.com/tidemark/tidemark/internal/config"
)

// Store is the control plane's state: tokens (hashed), declared pipelines,
// leases, per-pipeline status and triggers. One schema on SQLite (the
// embedded default, a directory) or PostgreSQL (a postgres:// URL); every
// method is one statement or one transaction, safe for concurrent use by
// several serve processes on the same state.
type Store struct {
	db       *sql.DB
	postgres bool
	// Dir is the SQLite state directory ("" for PostgreSQL).
	Dir string
}

// ErrNotFound: no such object in the caller's scope.
var ErrNotFound = errors.New("not found")

// OpenStore opens (and creates, or migrates) the state at state: a
// postgres:// URL, or a directory holding state.db.
func OpenStore(ctx context.Context, state string) (*Store, error) {
	s := &Store{}
	var err error
	if strings.HasPrefix(state, "postgres://") || strings.HasPrefix(state, "postgresql://") {
		s.postgres = true
		s.db, err = sql.Open("pgx", state)
	} else {
		s.Dir, err = filepath.Abs(state)
		if err == nil {
			err = os.MkdirAll(s.Dir, 0o700)
		}
		if err == nil {
			s.db, err = sql.Open(sqliteshim.ShimName, "file:"+filepath.Join(s.Dir, "state.db")+
				"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("state store %s: %w", config.RedactURL(state), err)
	}
	if !s.postgres {
		s.db.SetMaxOpenConns(4)
	}
	if err := s.migrate(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("state store %s: %s", config.RedactURL(state), config.RedactURL(err.Error()))
	}
	return s, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

var schema = []string{
	`CREATE TABLE IF NOT EXISTS tm_tokens (
		hash TEXT PRIMARY KEY, name TEXT NOT NULL, org TEXT NOT NULL, project TEXT NOT NULL, env TEXT NOT NULL,
		created_ms BIGINT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS tm_pipelines (
		id TEXT PRIMARY KEY, org TEXT NOT NULL, project TEXT NOT NULL, env TEXT NOT NULL, name TEXT NOT NULL,
		spec TEXT NOT NULL, rendered TEXT NOT NULL, checksum TEXT NOT NULL, version BIGINT NOT NULL,
		created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL, UNIQUE (org, project, env, name))`,
	`CREATE TABLE IF NOT EXISTS tm_leases (
		pipeline_id TEXT PRIMARY KEY, holder TEXT NOT NULL, fence BIGINT NOT NULL, expires_ms BIGINT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS tm_status (
		pipeline_id TEXT PRIMARY KEY, holder TEXT NOT NULL, fence BIGINT NOT NULL, state TEXT NOT NULL,
		checksum TEXT NOT NULL, pid BIGINT NOT NULL, restarts BIGINT NOT NULL, started_ms BIGINT NOT NULL,
		lag_seconds DOUBLE PRECISION NOT NULL, lag_bytes BIGINT NOT NULL, tables_total BIGINT NOT NULL,
		tables_done BIGINT NOT NULL, snapshot_done BIGINT NOT NULL, last_error_code TEXT NOT NULL,
		last_error TEXT NOT NULL, done_tables TEXT NOT NULL, updated_ms BIGINT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS tm_triggers (
		id TEXT PRIMARY KEY, pipeline_id TEXT NOT NULL, org TEXT NOT NULL, project TEXT NOT NULL, env TEXT NOT NULL,
		pipeline TEXT NOT NULL, event TEXT NOT NULL, event_id TEXT NOT NULL, name TEXT NOT NULL, url TEXT NOT NULL,
		run_id TEXT NOT NULL, created_ms BIGINT NOT NULL, attempts BIGINT NOT NULL, next_ms BIGINT NOT NULL,
		claimed_by TEXT, claim_until_ms BIGINT, completed_ms BIGINT, last_status BIGINT NOT NULL,
		last_error TEXT NOT NULL, UNIQUE (event_id, name))`,
}

func (s *Store) migrate(ctx context.Context) error {
	for _, q := range schema {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// q rewrites ? placeholders to PostgreSQL's $n.
func (s *Store) q(query string) string {
	if !s.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.q(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func nowMS() int64 { return time.Now().UnixMilli() }

func randomID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// idRE is the form of a pipeline id (randomID(12)); anything else is not found.
var idRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

// HashToken is how a token is stored: its SHA-256 (tokens are 256 random
// bits, so no salt or slow hash is needed).
func HashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// CreateToken makes a token for scope and returns it in clear, the only
// time it is ever seen; the store keeps its hash.
func (s *Store) CreateToken(ctx context.Context, name string, sc Scope) (string, error) {
	tok := "tmk_" + randomID(32)
	return tok, s.AddTokenHash(ctx, name, sc, HashToken(tok))
}

// AddTokenHash stores a token's hash (idempotent).
func (s *Store) AddTokenHash(ctx context.Context, name string, sc Scope, hash string) error {
	_, err := s.exec(ctx, `INSERT INTO tm_tokens (hash, name, org, project, env, created_ms) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (hash) DO NOTHING`, hash, name, sc.Org, sc.Project, sc.Env, nowMS())
	return err
}

// TokenScope returns the scope of the token whose hash is hash.
func (s *Store) TokenScope(ctx context.Context, hash string) (Scope, error) {
	var sc Scope
	err := s.db.QueryRowContext(ctx, s.q(`SELECT org, project, env FROM tm_tokens WHERE hash = ?`), hash).Scan(&sc.Org, &sc.Project, &sc.Env)
	if errors.Is(err, sql.ErrNoRows) {
		return Scope{}, ErrNotFound
	}
	return sc, err
}

// Pipeline is a declared pipeline as stored, with its last status.
type Pipeline struct {
	ID       string       `json:"id"`
	Org      string       `json:"org"`
	Project  string       `json:"project"`
	Env      string       `json:"env"`
	Name     string       `json:"name"`
	Spec     PipelineSpec `json:"spec"`
	Checksum string       `json:"checksum"`
	Version  int64        `json:"version"`
	Created  time.Time    `json:"created"`
	Updated  time.Time    `json:"updated"`
	// Warehouse, Slot and TopicPrefix are where the control plane put it.
	Warehouse   string  `json:"warehouse"`
	Slot        string  `json:"slot"`
	TopicPrefix string  `json:"topic_prefix,omitempty"`
	Status      *Status `json:"status,omitempty"`
	rendered    string
}

// Path is org/project/env/name.
func (p Pipeline) Path() string { return p.Org + "/" + p.Project + "/" + p.Env + "/" + p.Name }

// Status is what the supervisor holding a pipeline's lease last saw.
type Status struct {
	// State: starting, running, snapshotting, backoff (the child exited;
	// restarting after a wait), stopped.
	State         string    `json:"state"`
	Holder        string    `json:"holder"`
	Fence         int64     `json:"fence"`
	Checksum      string    `json:"checksum"`
	PID           int64     `json:"pid"`
	Restarts      int64     `json:"restarts"`
	Started       time.Time `json:"started"`
	LagSeconds    float64   `json:"lag_seconds"`
	LagBytes      int64     `json:"lag_bytes"`
	TablesTotal   int64     `json:"tables_total"`
	TablesDone    int64     `json:"tables_done"`
	SnapshotDone  bool      `json:"snapshot_done"`
	LastErrorCode string    `json:"last_error_code,omitempty"`
	LastError     string    `json:"last_error,omitempty"`
	// DoneTables are the tables whose initial snapshot was seen complete
	// (kept across restarts: a restarted child reports a table's snapshot
	// state only at its next commit).
	DoneTables []string  `json:"done_tables,omitempty"`
	Updated    time.Time `json:"updated"`
}

const pipelineCols = `p.id, p.org, p.project, p.env, p.name, p.spec, p.rendered, p.checksum, p.version, p.created_ms, p.updated_ms,
	s.state, s.holder, s.fence, s.checksum, s.pid, s.restarts, s.started_ms, s.lag_seconds, s.lag_bytes, s.tables_total,
	s.tables_done, s.snapshot_done, s.last_error_code, s.last_error, s.done_tables, s.updated_ms`

func scanPipeline(sc interface{ Scan(...any) error }, l Layout) (Pipeline, error) {
	var p Pipeline
	var spec string
	var cr, up int64
	var st struct {
		state, holder, checksum, code, msg, doneTables         sql.NullString
		fence, pid, restarts, started, lagB, tt, td, done, upd sql.NullInt64
		lagS                                                   sql.NullFloat64
	}
	err := sc.Scan(&p.ID, &p.Org, &p.Project, &p.Env, &p.Name, &spec, &p.rendered, &p.Checksum, &p.Version, &cr, &up,
		&st.state, &st.holder, &st.fence, &st.checksum, &st.pid, &st.restarts, &st.started, &st.lagS, &st.lagB, &st.tt,
		&st.td, &st.done, &st.code, &st.msg, &st.doneTables, &st.upd)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal([]byte(spec), &p.Spec); err != nil {
		return p, fmt.Errorf("pipeline %s: stored spec: %w", p.ID, err)
	}
	p.Created, p.Updated = time.UnixMilli(cr).UTC(), time.UnixMilli(up).UTC()
	p.Warehouse = l.Warehouse(p.Org, p.Project, p.Env, p.Name)
	p.Slot = SlotName(p.Org, p.Project, p.Env, p.Name)
	if p.Spec.Sink != "" {
		p.TopicPrefix = TopicPrefix(p.Org, p.Project, p.Env, p.Name)
	}
	if st.state.Valid {
		p.Status = &Status{State: st.state.String, Holder: st.holder.String, Fence: st.fence.Int64, Checksum: st.checksum.String,
			PID: st.pid.Int64, Restarts: st.restarts.Int64, Started: time.UnixMilli(st.started.Int64).UTC(),
			LagSeconds: st.lagS.Float64, LagBytes: st.lagB.Int64, TablesTotal: st.tt.Int64, TablesDone: st.td.Int64,
			SnapshotDone: st.done.Int64 == 1, LastErrorCode: st.code.String, LastError: st.msg.String,
			Updated: time.UnixMilli(st.upd.Int64).UTC()}
		_ = json.Unmarshal([]byte(st.doneTables.String), &p.Status.DoneTables)
	}
	return p, nil
}

// scopeWhere filters p by sc.
func scopeWhere(sc Scope) (string, []any) {
	var w []string
	var args []any
	if sc.Org != "" {
		w, args = append(w, "p.org = ?"), append(args, sc.Org)
	}
	if sc.Project != "" {
		w, args = append(w, "p.project = ?"), append(args, sc.Project)
	}
	if sc.Env != "" {
		w, args = append(w, "p.env = ?"), append(args, sc.Env)
	}
	if len(w) == 0 {
		return "1 = 1", nil
	}
	return strings.Join(w, " AND "), args
}

// Pipelines lists the pipelines inside sc, by path.
func (s *Store) Pipelines(ctx context.Context, sc Scope, l Layout) ([]Pipeline, error) {
	w, args := scopeWhere(sc)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+pipelineCols+` FROM tm_pipelines p LEFT JOIN tm_status s ON s.pipeline_id = p.id
		WHERE `+w+` ORDER BY p.org, p.project, p.env, p.name`), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Pipeline
	for rows.Next() {
		p, err := scanPipeline(rows, l)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Pipeline returns one pipeline inside sc; ErrNotFound when it does not
// exist or lies outside sc (the two are not told apart).
func (s *Store) Pipeline(ctx context.Context, sc Scope, id string, l Layout) (Pipeline, error) {
	if !idRE.MatchString(id) {
		return Pipeline{}, ErrNotFound
	}
	w, args := scopeWhere(sc)
	p, err := scanPipeline(s.db.QueryRowContext(ctx, s.q(`SELECT `+pipelineCols+` FROM tm_pipelines p
		LEFT JOIN tm_status s ON s.pipeline_id = p.id WHERE p.id = ? AND `+w), append([]any{id}, args...)...), l)
	if errors.Is(err, sql.ErrNoRows) {
		return Pipeline{}, ErrNotFound
	}
	return p, err
}

// Change is what apply did to one pipeline.
type Change struct {
	Path     string `json:"path"`
	ID       string `json:"id"`
	Action   string `json:"action"` // created, changed, unchanged, removed
	Checksum string `json:"checksum,omitempty"`
	// LeftBehind names what a removed pipeline leaves (slot, publication,
	// lake tables, topics): apply without --prune never drops data.
	LeftBehind []string `json:"left_behind,omitempty"`
	// Pruned: apply --prune dropped them; PruneError says why not.
	Pruned     bool   `json:"pruned,omitempty"`
	PruneError string `json:"prune_error,omitempty"`
	rendered   []byte
}

// Apply makes the declared environments hold exactly the desired
// pipelines, in one transaction: new ones are created, those whose
// rendered config changed get the new config (a new version; the
// supervisor restarts them), unchanged ones are not touched, and those no
// longer declared are deleted. Environments not in envs are not touched.
func (s *Store) Apply(ctx context.Context, envs []Scope, desired []Desired, l Layout) ([]Change, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	type cur struct{ id, checksum string }
	var changes []Change
	now := nowMS()
	for _, e := range envs {
		rows, err := tx.QueryContext(ctx, s.q(`SELECT id, name, checksum FROM tm_pipelines WHERE org = ? AND project = ? AND env = ?`), e.Org, e.Project, e.Env)
		if err != nil {
			return nil, err
		}
		have := map[string]cur{}
		for rows.Next() {
			var c cur
			var name string
			if err := rows.Scan(&c.id, &name, &c.checksum); err != nil {
				rows.Close()
				return nil, err
			}
			have[name] = c
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for _, d := range desired {
			if d.Org != e.Org || d.Project != e.Project || d.Env != e.Env {
				continue
			}
			spec, _ := json.Marshal(d.Spec)
			c, ok := have[d.Spec.Name]
			delete(have, d.Spec.Name)
			switch {
			case !ok:
				id := randomID(12)
				if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO tm_pipelines (id, org, project, env, name, spec, rendered, checksum, version, created_ms, updated_ms)
					VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`), id, d.Org, d.Project, d.Env, d.Spec.Name, string(spec), string(d.Rendered), d.Checksum, now, now); err != nil {
					return nil, fmt.Errorf("%s: %w", d.Path(), err)
				}
				changes = append(changes, Change{Path: d.Path(), ID: id, Action: "created", Checksum: d.Checksum})
			case c.checksum != d.Checksum:
				if _, err := tx.ExecContext(ctx, s.q(`UPDATE tm_pipelines SET spec = ?, rendered = ?, checksum = ?, version = version + 1, updated_ms = ? WHERE id = ?`),
					string(spec), string(d.Rendered), d.Checksum, now, c.id); err != nil {
					return nil, fmt.Errorf("%s: %w", d.Path(), err)
				}
				changes = append(changes, Change{Path: d.Path(), ID: c.id, Action: "changed", Checksum: d.Checksum})
			default:
				changes = append(changes, Change{Path: d.Path(), ID: c.id, Action: "unchanged", Checksum: d.Checksum})
			}
		}
		for name, c := range have {
			var specText, rendered string
			if err := tx.QueryRowContext(ctx, s.q(`SELECT spec, rendered FROM tm_pipelines WHERE id = ?`), c.id).Scan(&specText, &rendered); err != nil {
				return nil, err
			}
			var spec PipelineSpec
			_ = json.Unmarshal([]byte(specText), &spec)
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM tm_pipelines WHERE id = ?`), c.id); err != nil {
				return nil, err
			}
			slot := SlotName(e.Org, e.Project, e.Env, name)
			left := []string{
				"replication slot " + slot + " and publication " + slot + " on the source (the slot holds WAL until dropped: SELECT pg_drop_replication_slot('" + slot + "'); DROP PUBLICATION " + slot + ")",
				"lake tables in " + l.Warehouse(e.Org, e.Project, e.Env, name),
			}
			if spec.Sink != "" {
				left = append(left, "Kafka topics "+TopicPrefix(e.Org, e.Project, e.Env, name)+".*")
			}
			changes = append(changes, Change{Path: e.Org + "/" + e.Project + "/" + e.Env + "/" + name, ID: c.id, Action: "removed", LeftBehind: left, rendered: []byte(rendered)})
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return changes, nil
}

// supervised is what the supervisor needs of a pipeline.
type supervised struct {
	ID, Path, Name, Checksum string
	Rendered                 []byte
	Spec                     PipelineSpec
	Org, Project, Env        string
}

func (p supervised) pipeline() Pipeline {
	return Pipeline{ID: p.ID, Org: p.Org, Project: p.Project, Env: p.Env, Name: p.Name, Spec: p.Spec, Checksum: p.Checksum}
}

// allPipelines lists every pipeline for the supervisor.
func (s *Store) allPipelines(ctx context.Context) ([]supervised, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, org, project, env, name, spec, rendered, checksum FROM tm_pipelines`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []supervised
	for rows.Next() {
		var p supervised
		var spec, rendered string
		if err := rows.Scan(&p.ID, &p.Org, &p.Project, &p.Env, &p.Name, &spec, &rendered, &p.Checksum); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(spec), &p.Spec); err != nil {
			return nil, fmt.Errorf("pipeline %s: stored spec: %w", p.ID, err)
		}
		p.Path = p.Org + "/" + p.Project + "/" + p.Env + "/" + p.Name
		p.Rendered = []byte(rendered)
		out = append(out, p)
	}
	return out, rows.Err()
}

// AcquireLease takes the pipeline's lease for holder when nobody holds it
// or the holder's lease expired, and returns its fence (the lease's
// generation, one more at every change of holder). ok is false when
// another holder's lease is live.
func (s *Store) AcquireLease(ctx context.Context, pipelineID, holder string, ttl time.Duration) (fence int64, ok bool, err error) {
	now := nowMS()
	n, err := s.exec(ctx, `INSERT INTO tm_leases (pipeline_id, holder, fence, expires_ms) VALUES (?, ?, 1, ?) ON CONFLICT (pipeline_id) DO NOTHING`,
		pipelineID, holder, now+ttl.Milliseconds())
	if err != nil {
		return 0, false, err
	}
	if n == 0 {
		if n, err = s.exec(ctx, `UPDATE tm_leases SET holder = ?, fence = fence + 1, expires_ms = ? WHERE pipeline_id = ? AND expires_ms < ?`,
			holder, now+ttl.Milliseconds(), pipelineID, now); err != nil {
			return 0, false, err
		}
	}
	if n == 0 {
		return 0, false, nil
	}
	err = s.db.QueryRowContext(ctx, s.q(`SELECT fence FROM tm_leases WHERE pipeline_id = ? AND holder = ?`), pipelineID, holder).Scan(&fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return fence, err == nil, err
}

// RenewLease extends the lease if holder still holds it at fence; false
// means it was lost (expired and taken): the holder must stop the pipeline.
func (s *Store) RenewLease(ctx context.Context, pipelineID, holder string, fence int64, ttl time.Duration) (bool, error) {
	n, err := s.exec(ctx, `UPDATE tm_leases SET expires_ms = ? WHERE pipeline_id = ? AND holder = ? AND fence = ?`,
		nowMS()+ttl.Milliseconds(), pipelineID, holder, fence)
	return n == 1, err
}

// ReleaseLease gives the lease up (its child is stopped).
func (s *Store) ReleaseLease(ctx context.Context, pipelineID, holder string, fence int64) error {
	_, err := s.exec(ctx, `DELETE FROM tm_leases WHERE pipeline_id = ? AND holder = ? AND fence = ?`, pipelineID, holder, fence)
	return err
}

// PutStatus records a pipeline's status, if holder still holds its lease at
// fence (a fenced-off supervisor cannot overwrite its successor's status).
func (s *Store) PutStatus(ctx context.Context, id string, st Status) error {
	done := 0
	if st.SnapshotDone {
		done = 1
	}
	doneTables, _ := json.Marshal(nonNil(st.DoneTables))
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM tm_leases WHERE pipeline_id = ? AND holder = ? AND fence = ?`), id, st.Holder, st.Fence).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM tm_status WHERE pipeline_id = ?`), id); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO tm_status (pipeline_id, holder, fence, state, checksum, pid, restarts, started_ms, lag_seconds,
		lag_bytes, tables_total, tables_done, snapshot_done, last_error_code, last_error, done_tables, updated_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		id, st.Holder, st.Fence, st.State, st.Checksum, st.PID, st.Restarts, st.Started.UnixMilli(), st.LagSeconds, st.LagBytes,
		st.TablesTotal, st.TablesDone, done, st.LastErrorCode, st.LastError, string(doneTables), nowMS()); err != nil {
		return err
	}
	return tx.Commit()
}

// lastStatus is a pipeline's last recorded status, whoever wrote it.
func (s *Store) lastStatus(ctx context.Context, id string, l Layout) (*Status, error) {
	p, err := s.Pipeline(ctx, Scope{}, id, l)
	if err != nil {
		return nil, err
	}
	return p.Status, nil
}

// dropStatus removes the status of a pipeline no longer declared.
func (s *Store) dropStatus(ctx context.Context, id string) error {
	_, err := s.exec(ctx, `DELETE FROM tm_status WHERE pipeline_id = ?`, id)
	return err
}
