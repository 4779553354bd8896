package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tidemark/tidemark/internal/config"
)

func configSecret(s string) config.Secret { return config.NewSecret(s) }

// Client calls a serve's API (what apply and get use).
type Client struct {
	// Base is the server's URL, e.g. http://127.0.0.1:7878.
	Base  string
	Token string
	HTTP  *http.Client
}

// APIError is an error answer of the API.
type APIError struct {
	Status int
	Code   string `json:"code"`
	Msg    string `json:"error"`
}

func (e *APIError) Error() string {
	return fmt.Sprintf("[%s] %s (HTTP %d)", e.Code, e.Msg, e.Status)
}

func (c *Client) do(ctx context.Context, method, path, ctype string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("tidemark serve at %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Msg == "" {
			e.Msg = strings.TrimSpace(string(data))
		}
		return e
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// Apply sends a pipelines.yaml; prune: drop what removed pipelines leave.
func (c *Client) Apply(ctx context.Context, yaml []byte, prune bool) ([]Change, error) {
	var out struct {
		Changes []Change `json:"changes"`
	}
	path := "/v1/apply"
	if prune {
		path += "?prune=true"
	}
	err := c.do(ctx, http.MethodPost, path, "application/yaml", yaml, &out)
	return out.Changes, err
}

// Pipelines lists the pipelines the token sees.
func (c *Client) Pipelines(ctx context.Context) ([]Pipeline, error) {
	var out struct {
		Pipelines []Pipeline `json:"pipelines"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/pipelines", "", nil, &out)
	return out.Pipelines, err
}

// Triggers lists the triggers the token sees.
func (c *Client) Triggers(ctx context.Context) ([]Trigger, error) {
	var out struct {
		Triggers []Trigger `json:"triggers"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/triggers", "", nil, &out)
	return out.Triggers, err
}

// CreateToken makes a token for scope (admin only) and returns it.
func (c *Client) CreateToken(ctx context.Context, scope, name string) (string, error) {
	body, _ := json.Marshal(map[string]string{"scope": scope, "name": name})
	var out struct {
		Token string `json:"token"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/tokens", "application/json", body, &out)
	return out.Token, err
}
