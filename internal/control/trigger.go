package control

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// Trigger is one downstream call of one event, as stored. It is written
// before the first attempt; CompletedAt is set once, by the attempt that
// got a 2xx or a 409 (the downstream already has the run id: a call
// repeated after a crash between the call and its record).
type Trigger struct {
	ID         string     `json:"id"`
	PipelineID string     `json:"pipeline_id"`
	Pipeline   string     `json:"pipeline"` // org/project/env/name
	Event      string     `json:"event"`
	EventID    string     `json:"event_id"`
	Name       string     `json:"name"`
	URL        string     `json:"url"`
	RunID      string     `json:"run_id"`
	Created    time.Time  `json:"created"`
	Attempts   int64      `json:"attempts"`
	NextTry    time.Time  `json:"next_attempt"`
	Completed  *time.Time `json:"completed,omitempty"`
	LastStatus int64      `json:"last_status"`
	LastError  string     `json:"last_error,omitempty"`
}

// RunID is the deterministic run id of an event: the downstream
// deduplicates on it (Airflow answers 409 to a dag_run_id it has).
func RunID(event, eventID string) string {
	if event == EventSnapshotCompleted {
		return "snapshot_" + eventID
	}
	return event + "_" + eventID
}

// SnapshotEventID is the id of a pipeline's "initial snapshot completed"
// event: the pipeline's id, which is new for each declared incarnation of
// a pipeline (removing a pipeline and declaring it again is a new one).
func SnapshotEventID(pipelineID string) string { return pipelineID }

// RecordEvent stores one trigger per configured downstream of the event,
// before any call is made. It is idempotent and safe to call concurrently
// from any number of observers: the (event id, trigger) pair is unique, and
// a second recording changes nothing. It returns how many were new.
func (s *Store) RecordEvent(ctx context.Context, p Pipeline, event, eventID string) (int, error) {
	n := 0
	for _, t := range p.Spec.Triggers {
		if t.On != event {
			continue
		}
		now := nowMS()
		k, err := s.exec(ctx, `INSERT INTO tm_triggers (id, pipeline_id, org, project, env, pipeline, event, event_id, name, url, run_id,
			created_ms, attempts, next_ms, last_status, last_error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 0, '')
			ON CONFLICT (event_id, name) DO NOTHING`,
			randomID(12), p.ID, p.Org, p.Project, p.Env, p.Path(), event, eventID, t.Name, t.URL, RunID(event, eventID), now, now)
		if err != nil {
			return n, fmt.Errorf("record trigger %s of %s: %w", t.Name, p.Path(), err)
		}
		n += int(k)
	}
	return n, nil
}

// Triggers lists the triggers inside sc, optionally of one pipeline.
func (s *Store) Triggers(ctx context.Context, sc Scope, pipelineID string) ([]Trigger, error) {
	w, args := scopeWhere(sc)
	if pipelineID != "" {
		w += " AND p.pipeline_id = ?"
		args = append(args, pipelineID)
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT p.id, p.pipeline_id, p.pipeline, p.event, p.event_id, p.name, p.url, p.run_id,
		p.created_ms, p.attempts, p.next_ms, p.completed_ms, p.last_status, p.last_error FROM tm_triggers p WHERE `+w+` ORDER BY p.created_ms, p.id`), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Trigger
	for rows.Next() {
		var t Trigger
		var cr, next int64
		var done sql.NullInt64
		if err := rows.Scan(&t.ID, &t.PipelineID, &t.Pipeline, &t.Event, &t.EventID, &t.Name, &t.URL, &t.RunID, &cr, &t.Attempts,
			&next, &done, &t.LastStatus, &t.LastError); err != nil {
			return nil, err
		}
		t.Created, t.NextTry = time.UnixMilli(cr).UTC(), time.UnixMilli(next).UTC()
		if done.Valid {
			c := time.UnixMilli(done.Int64).UTC()
			t.Completed = &c
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Deliverer calls the downstream of every stored, due trigger. Any number
// of deliverers (in one serve or several) may run on one store: an attempt
// first claims its trigger (a conditional UPDATE), so two never call for
// the same trigger at once, and completion is recorded only while
// completed_ms IS NULL. A claim outlives a crash by ClaimTTL at most; the
// attempt after it repeats the call with the same run id, which the
// downstream answers with 409: counted as done.
type Deliverer struct {
	Store  *Store
	Holder string
	Log    *slog.Logger
	Client *http.Client
	// InitialBackoff doubles after each failed attempt up to MaxBackoff
	// (30 s and 30 min in production).
	InitialBackoff, MaxBackoff time.Duration
	// ClaimTTL bounds how long a claimed attempt may take (the HTTP call's
	// timeout is below it).
	ClaimTTL time.Duration
}

// Run delivers until ctx ends, looking for due triggers every poll.
func (d *Deliverer) Run(ctx context.Context, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if err := d.DeliverDue(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn("trigger delivery", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// DeliverDue makes one attempt for each due trigger it can claim.
func (d *Deliverer) DeliverDue(ctx context.Context) error {
	s := d.Store
	now := nowMS()
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id, pipeline, event, event_id, name, url, run_id, attempts FROM tm_triggers
		WHERE completed_ms IS NULL AND next_ms <= ? AND (claim_until_ms IS NULL OR claim_until_ms < ?) ORDER BY next_ms`), now, now)
	if err != nil {
		return err
	}
	var due []Trigger
	for rows.Next() {
		var t Trigger
		if err := rows.Scan(&t.ID, &t.Pipeline, &t.Event, &t.EventID, &t.Name, &t.URL, &t.RunID, &t.Attempts); err != nil {
			rows.Close()
			return err
		}
		due = append(due, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range due {
		if err := d.attempt(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

func (d *Deliverer) attempt(ctx context.Context, t Trigger) error {
	s := d.Store
	now := nowMS()
	n, err := s.exec(ctx, `UPDATE tm_triggers SET claimed_by = ?, claim_until_ms = ?, attempts = attempts + 1
		WHERE id = ? AND completed_ms IS NULL AND (claim_until_ms IS NULL OR claim_until_ms < ?)`, d.Holder, now+d.ClaimTTL.Milliseconds(), t.ID, now)
	if err != nil || n == 0 {
		return err // claimed by another deliverer, or done meanwhile
	}
	attempts := t.Attempts + 1
	status, callErr := d.call(ctx, t)
	if ctx.Err() != nil {
		return nil // shutting down: the claim expires, the next serve retries
	}
	if callErr == nil && (status/100 == 2 || status == http.StatusConflict) {
		if _, err := s.exec(ctx, `UPDATE tm_triggers SET completed_ms = ?, last_status = ?, last_error = '', claim_until_ms = NULL
			WHERE id = ? AND claimed_by = ? AND completed_ms IS NULL`, nowMS(), status, t.ID, d.Holder); err != nil {
			return err
		}
		d.Log.Info("trigger delivered", "pipeline", t.Pipeline, "trigger", t.Name, "run_id", t.RunID, "status", status, "attempts", attempts)
		return nil
	}
	msg := ""
	if callErr != nil {
		msg = callErr.Error()
	} else {
		msg = fmt.Sprintf("HTTP %d", status)
	}
	wait := d.backoff(attempts)
	d.Log.Warn("trigger failed, retrying", "pipeline", t.Pipeline, "trigger", t.Name, "run_id", t.RunID, "error", msg, "attempts", attempts, "retry_in", wait)
	_, err = s.exec(ctx, `UPDATE tm_triggers SET next_ms = ?, last_status = ?, last_error = ?, claim_until_ms = NULL
		WHERE id = ? AND claimed_by = ? AND completed_ms IS NULL`, nowMS()+wait.Milliseconds(), status, msg, t.ID, d.Holder)
	return err
}

func (d *Deliverer) backoff(attempts int64) time.Duration {
	w := d.InitialBackoff
	for i := int64(1); i < attempts && w < d.MaxBackoff; i++ {
		w *= 2
	}
	return min(w, d.MaxBackoff)
}

// call POSTs the Airflow-shaped body: {"dag_run_id": run id, "conf": {...}}.
func (d *Deliverer) call(ctx context.Context, t Trigger) (int, error) {
	body, _ := json.Marshal(map[string]any{
		"dag_run_id": t.RunID,
		"conf":       map[string]any{"pipeline": t.Pipeline, "event": t.Event, "event_id": t.EventID, "trigger": t.Name},
	})
	cctx, cancel := context.WithTimeout(ctx, d.ClaimTTL/2)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", t.RunID)
	resp, err := d.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, nil
}
