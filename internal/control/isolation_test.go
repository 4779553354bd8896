package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/control"
)

// TestIsolation walks every API route with tokens of tenant A (scoped to
// its organisation, project and environment) against tenant B's objects,
// real ids and guessed ones: each answer is 403 or 404 and carries nothing
// of B.
func TestIsolation(t *testing.T) {
	t.Setenv("ACME_PG", "postgres://acme@127.0.0.1:1/shop")
	t.Setenv("GLOBEX_PW", "globex-canary-pw")
	backends(t, func(t *testing.T, state string) {
		ctx := context.Background()
		st := openStore(t, state)
		api := &control.API{Store: st, Layout: control.Layout{LakeRoot: t.TempDir()}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), CheckDir: t.TempDir()}
		srv := httptest.NewServer(api.Handler())
		defer srv.Close()
		admin, err := st.CreateToken(ctx, "admin", control.Scope{})
		if err != nil {
			t.Fatal(err)
		}
		call := func(tok, method, path string, body []byte) (int, string) {
			req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := call(admin, "POST", "/v1/apply", []byte(twoOrgs)); code != 200 {
			t.Fatalf("admin apply: %d %s", code, body)
		}
		all, err := st.Pipelines(ctx, control.Scope{}, api.Layout)
		if err != nil || len(all) != 2 {
			t.Fatalf("pipelines: %v %d", err, len(all))
		}
		var b control.Pipeline
		for _, p := range all {
			if p.Org == "globex" {
				b = p
			}
		}
		if _, err := st.RecordEvent(ctx, b, control.EventSnapshotCompleted, b.ID); err != nil {
			t.Fatal(err)
		}
		mkToken := func(scope string) string {
			code, body := call(admin, "POST", "/v1/tokens", []byte(`{"scope":"`+scope+`","name":"t"}`))
			if code != http.StatusCreated {
				t.Fatalf("create token %s: %d %s", scope, code, body)
			}
			var out struct{ Token string }
			_ = json.Unmarshal([]byte(body), &out)
			return out.Token
		}
		// B's identifiers: none may appear in an answer to A.
		secretsOfB := []string{b.ID, "globex", "contacts", "crm", "globex-canary-pw"}
		guessed := []string{b.ID, strings.ToUpper(b.ID), b.ID[:12], "000000000000000000000000", "../" + b.ID, b.ID + "%00"}
		applyB := []byte(strings.Replace(twoOrgs[strings.Index(twoOrgs, "  - name: globex"):], "  - name: globex", "organisations:\n  - name: globex", 1))
		for _, scope := range []string{"acme", "acme/shop", "acme/shop/prod"} {
			tok := mkToken(scope)
			// Each route, with what tenant A may try against B.
			probes := map[string][][3]string{ // route → {method, path, body}
				"GET /v1/whoami":    {{"GET", "/v1/whoami", ""}},
				"GET /v1/pipelines": {{"GET", "/v1/pipelines", ""}},
				"GET /v1/triggers":  {{"GET", "/v1/triggers", ""}},
				"POST /v1/apply":    {{"POST", "/v1/apply", string(applyB)}},
				"POST /v1/tokens":   {{"POST", "/v1/tokens", `{"scope":"globex","name":"steal"}`}, {"POST", "/v1/tokens", `{"scope":"acme","name":"widen"}`}},
			}
			for _, id := range guessed {
				probes["GET /v1/pipelines/{id}"] = append(probes["GET /v1/pipelines/{id}"], [3]string{"GET", "/v1/pipelines/" + id, ""})
				probes["GET /v1/pipelines/{id}/triggers"] = append(probes["GET /v1/pipelines/{id}/triggers"], [3]string{"GET", "/v1/pipelines/" + id + "/triggers", ""})
			}
			for _, route := range control.Routes {
				ps, ok := probes[route]
				if !ok {
					t.Errorf("route %s has no isolation probe: add one", route)
				}
				for _, pr := range ps {
					code, body := call(tok, pr[0], pr[1], []byte(pr[2]))
					for _, s := range secretsOfB {
						// apply's refusal names the environment of the caller's own file.
						if route == "POST /v1/apply" && s != b.ID && s != "globex-canary-pw" {
							continue
						}
						if strings.Contains(body, s) {
							t.Errorf("%s token, %s %s: the answer (%d) shows %q of tenant B: %s", scope, pr[0], pr[1], code, s, body)
						}
					}
					switch route {
					case "GET /v1/whoami", "GET /v1/pipelines", "GET /v1/triggers":
						if code != 200 {
							t.Errorf("%s token, %s: %d, want 200 with A's data only", scope, pr[1], code)
						}
					default:
						if code != 403 && code != 404 {
							t.Errorf("%s token, %s %s: %d, want 403 or 404: %s", scope, pr[0], pr[1], code, body)
						}
					}
				}
			}
			// A sees its own pipeline.
			if code, body := call(tok, "GET", "/v1/pipelines", nil); code != 200 || !strings.Contains(body, "acme/shop/prod") && !strings.Contains(body, `"org": "acme"`) {
				t.Errorf("%s token: own pipelines: %d %s", scope, code, body)
			}
			// B's pipeline is untouched by A's attempt to apply it.
			after, _ := st.Pipeline(ctx, control.Scope{}, b.ID, api.Layout)
			if after.Version != b.Version || after.Checksum != b.Checksum {
				t.Errorf("%s token changed tenant B's pipeline", scope)
			}
		}
		// A token of another environment of acme does not see prod.
		other := mkToken("acme/shop/staging")
		if _, body := call(other, "GET", "/v1/pipelines", nil); strings.Contains(body, "orders") {
			t.Errorf("an acme/shop/staging token lists prod's pipeline: %s", body)
		}
		for _, tok := range []string{"", "tmk_guessed", admin + "x"} {
			if code, _ := call(tok, "GET", "/v1/pipelines", nil); code != 401 {
				t.Errorf("token %q: %d, want 401", tok, code)
			}
		}
		// The store keeps no token in clear and no secret value.
		d := control.Dump(t, st)
		if strings.Contains(d, strings.TrimPrefix(admin, "tmk_")) {
			t.Error("the store holds a token in clear")
		}
		if strings.Contains(d, "globex-canary-pw") {
			t.Error("the store holds a secret's value")
		}
	})
}
