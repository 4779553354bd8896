package control

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/config"
)

// API is the REST/JSON interface of serve. Every route but /healthz needs
// `Authorization: Bearer <token>`; a token sees only what lies inside its
// scope, and an object outside it answers 404 exactly as one that does not
// exist (ids cannot be probed). Routes:
//
//	GET  /healthz                     200 "ok"
//	GET  /v1/whoami                   the token's scope
//	GET  /v1/pipelines                the pipelines in scope, with status
//	GET  /v1/pipelines/{id}           one pipeline
//	GET  /v1/pipelines/{id}/triggers  its trigger history
//	GET  /v1/triggers                 every trigger in scope
//	POST /v1/apply[?prune=true]       a pipelines.yaml (body); its environments must lie in scope (else 403)
//	POST /v1/tokens                   {"scope": "org[/project[/env]]", "name": …}: admin only (else 403)
type API struct {
	Store  *Store
	Layout Layout
	Log    *slog.Logger
	// CheckDir is where apply writes rendered configs to check them.
	CheckDir string
	// PruneWait bounds how long apply --prune waits for a removed
	// pipeline's replica to stop before dropping its slot and lake.
	PruneWait time.Duration
}

// Handler returns the API's routes.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("GET /v1/whoami", a.auth(a.whoami))
	mux.Handle("GET /v1/pipelines", a.auth(a.listPipelines))
	mux.Handle("GET /v1/pipelines/{id}", a.auth(a.getPipeline))
	mux.Handle("GET /v1/pipelines/{id}/triggers", a.auth(a.pipelineTriggers))
	mux.Handle("GET /v1/triggers", a.auth(a.listTriggers))
	mux.Handle("POST /v1/apply", a.auth(a.apply))
	mux.Handle("POST /v1/tokens", a.auth(a.createToken))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		apiError(w, http.StatusNotFound, "not_found", "no such route")
	})
	return mux
}

// Routes lists every authenticated route (method and path pattern), for
// the isolation test to walk them all.
var Routes = []string{
	"GET /v1/whoami", "GET /v1/pipelines", "GET /v1/pipelines/{id}", "GET /v1/pipelines/{id}/triggers",
	"GET /v1/triggers", "POST /v1/apply", "POST /v1/tokens",
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": config.RedactURL(msg), "code": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (a *API) auth(h func(http.ResponseWriter, *http.Request, Scope)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tok == "" {
			apiError(w, http.StatusUnauthorized, "unauthorized", "missing bearer token")
			return
		}
		sc, err := a.Store.TokenScope(r.Context(), HashToken(strings.TrimSpace(tok)))
		if errors.Is(err, ErrNotFound) {
			apiError(w, http.StatusUnauthorized, "unauthorized", "unknown token")
			return
		}
		if err != nil {
			a.internal(w, err)
			return
		}
		h(w, r, sc)
	})
}

func (a *API) internal(w http.ResponseWriter, err error) {
	a.Log.Error("api", "error", config.RedactURL(err.Error()))
	apiError(w, http.StatusInternalServerError, "internal", "internal error (see serve's log)")
}

func (a *API) whoami(w http.ResponseWriter, _ *http.Request, sc Scope) {
	writeJSON(w, http.StatusOK, map[string]any{"scope": sc.String(), "admin": sc.Admin()})
}

// redacted hides passwords in what a pipeline shows (its declared
// references carry none; a user's passwordless URL passes as is).
func redacted(p Pipeline) Pipeline {
	p.Spec.Source = config.RedactURL(p.Spec.Source)
	p.Spec.Sink = config.RedactURL(p.Spec.Sink)
	return p
}

func (a *API) listPipelines(w http.ResponseWriter, r *http.Request, sc Scope) {
	ps, err := a.Store.Pipelines(r.Context(), sc, a.Layout)
	if err != nil {
		a.internal(w, err)
		return
	}
	out := make([]Pipeline, 0, len(ps))
	for _, p := range ps {
		out = append(out, redacted(p))
	}
	writeJSON(w, http.StatusOK, map[string]any{"pipelines": out})
}

func (a *API) getPipeline(w http.ResponseWriter, r *http.Request, sc Scope) {
	p, err := a.Store.Pipeline(r.Context(), sc, r.PathValue("id"), a.Layout)
	if errors.Is(err, ErrNotFound) {
		apiError(w, http.StatusNotFound, "not_found", "no such pipeline")
		return
	}
	if err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, redacted(p))
}

func (a *API) pipelineTriggers(w http.ResponseWriter, r *http.Request, sc Scope) {
	id := r.PathValue("id")
	if _, err := a.Store.Pipeline(r.Context(), sc, id, a.Layout); errors.Is(err, ErrNotFound) {
		apiError(w, http.StatusNotFound, "not_found", "no such pipeline")
		return
	} else if err != nil {
		a.internal(w, err)
		return
	}
	ts, err := a.Store.Triggers(r.Context(), sc, id)
	if err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"triggers": nonNil(ts)})
}

func (a *API) listTriggers(w http.ResponseWriter, r *http.Request, sc Scope) {
	ts, err := a.Store.Triggers(r.Context(), sc, "")
	if err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"triggers": nonNil(ts)})
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (a *API) apply(w http.ResponseWriter, r *http.Request, sc Scope) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	d, err := ParseDeclaration(body)
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_declaration", err.Error())
		return
	}
	envs, desired, err := a.Layout.Resolve(d, sc)
	var se *scopeError
	switch {
	case errors.As(err, &se):
		apiError(w, http.StatusForbidden, "forbidden", err.Error())
		return
	case errors.Is(err, ErrInlineSecret):
		apiError(w, http.StatusBadRequest, "inline_secret", err.Error())
		return
	case err != nil:
		apiError(w, http.StatusBadRequest, "bad_declaration", err.Error())
		return
	}
	var errs []error
	for _, d := range desired {
		if err := CheckRendered(a.CheckDir, d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		apiError(w, http.StatusBadRequest, "bad_config", errors.Join(errs...).Error())
		return
	}
	changes, err := a.Store.Apply(r.Context(), envs, desired, a.Layout)
	if err != nil {
		a.internal(w, err)
		return
	}
	if r.URL.Query().Get("prune") == "true" {
		for i := range changes {
			if changes[i].Action == "removed" {
				a.prune(r.Context(), &changes[i], a.PruneWait)
			}
		}
	}
	for _, c := range changes {
		if c.Action != "unchanged" {
			a.Log.Info("apply", "pipeline", c.Path, "id", c.ID, "action", c.Action)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"changes": nonNil(changes)})
}

func (a *API) createToken(w http.ResponseWriter, r *http.Request, sc Scope) {
	if !sc.Admin() {
		apiError(w, http.StatusForbidden, "forbidden", "creating tokens needs an admin token")
		return
	}
	var req struct {
		Scope string `json:"scope"`
		Name  string `json:"name"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", "body: want {\"scope\": \"org[/project[/env]]\", \"name\": \"…\"}")
		return
	}
	want, err := ParseScope(req.Scope)
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	tok, err := a.Store.CreateToken(r.Context(), req.Name, want)
	if err != nil {
		a.internal(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"token": tok, "scope": want.String(), "name": req.Name})
}
