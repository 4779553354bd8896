package control

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tidemark/tidemark/internal/config"
)

// Declaration is a pipelines.yaml: organisations → projects → environments
// → pipelines. It is what `tidemark apply` sends; the control plane
// decides everything a tenant must not choose (warehouse, slot, topic
// prefix, metrics address).
type Declaration struct {
	Organisations []OrgDecl `yaml:"organisations" json:"organisations"`
}

// OrgDecl is one organisation of a declaration.
type OrgDecl struct {
	Name     string        `yaml:"name" json:"name"`
	Projects []ProjectDecl `yaml:"projects" json:"projects"`
}

// ProjectDecl is one project of an organisation.
type ProjectDecl struct {
	Name         string    `yaml:"name" json:"name"`
	Environments []EnvDecl `yaml:"environments" json:"environments"`
}

// EnvDecl is one environment: the unit of isolation (its own warehouse
// prefix, topic prefix, slot names) and of apply (an environment a file
// declares holds exactly the pipelines the file lists).
type EnvDecl struct {
	Name      string         `yaml:"name" json:"name"`
	Pipelines []PipelineSpec `yaml:"pipelines" json:"pipelines"`
}

// PipelineSpec is one pipeline as declared. Secrets are references only:
// source is `${VAR}` (or a URL whose password is `${VAR}`) or source_file
// names a file; the reference is stored and expanded by the pipeline
// process from serve's environment, never by the control plane's store.
type PipelineSpec struct {
	Name string `yaml:"name" json:"name"`
	// SourceType is postgres (the default) or mysql: the reference does
	// not say, and the slot and publication are PostgreSQL's only.
	SourceType string         `yaml:"source_type,omitempty" json:"source_type,omitempty"`
	Source     string         `yaml:"source,omitempty" json:"source,omitempty"`
	SourceFile string         `yaml:"source_file,omitempty" json:"source_file,omitempty"`
	Tables     []string       `yaml:"tables,omitempty" json:"tables,omitempty"`
	Sink       string         `yaml:"sink,omitempty" json:"sink,omitempty"`
	Lake       map[string]any `yaml:"lake,omitempty" json:"lake,omitempty"`
	Settings   map[string]any `yaml:"settings,omitempty" json:"settings,omitempty"`
	Triggers   []TriggerSpec  `yaml:"triggers,omitempty" json:"triggers,omitempty"`
}

// TriggerSpec is a downstream call made once per event.
type TriggerSpec struct {
	Name string `yaml:"name" json:"name"`
	// On is the event: snapshot_completed (the initial snapshot of every
	// table of the pipeline is in the lake).
	On string `yaml:"on" json:"on"`
	// URL receives a POST of {"dag_run_id": "<event>_<event id>", "conf": {...}}
	// (Airflow's REST shape); 2xx and 409 count as done.
	URL string `yaml:"url" json:"url"`
}

// EventSnapshotCompleted is the event of a pipeline whose initial snapshot
// is complete for every table it captures.
const EventSnapshotCompleted = "snapshot_completed"

// ErrInlineSecret: a declaration carries a password in clear.
var ErrInlineSecret = errors.New("inline_secret")

// ownedKeys are run keys the control plane sets; a pipeline's settings may
// not set them (tenancy: where data lands is not the tenant's choice).
var ownedKeys = map[string]string{
	"name": "the pipeline's name", "warehouse": "the environment's warehouse prefix", "catalog": "the environment's catalog",
	"topic_prefix": "the environment's topic prefix", "slot": "derived from the environment", "publication": "derived from the environment",
	"metrics_addr": "chosen by serve", "spool_dir": "inside the pipeline's warehouse", "source": "the entry's source",
	"source_file": "the entry's source_file", "sink": "the entry's sink", "tables": "the entry's tables", "lake": "the entry's lake",
	"from": "load only", "group": "load only",
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// ParseDeclaration reads a pipelines.yaml strictly (unknown keys are errors).
// It does not expand ${VAR}: references are kept as written.
func ParseDeclaration(data []byte) (*Declaration, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var d Declaration
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("pipelines file: %s", config.RedactURL(err.Error()))
	}
	return &d, nil
}

// Scope is where a token (or an apply) reaches: an organisation, a project
// in it, or an environment in that; empty fields are "all". The zero Scope
// is the admin's: everything.
type Scope struct {
	Org     string `json:"org,omitempty"`
	Project string `json:"project,omitempty"`
	Env     string `json:"env,omitempty"`
}

// ParseScope reads "org[/project[/env]]" ("*" is the admin's scope).
func ParseScope(s string) (Scope, error) {
	if s == "*" {
		return Scope{}, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) > 3 {
		return Scope{}, fmt.Errorf("scope %q: want org[/project[/env]]", s)
	}
	for _, p := range parts {
		if !nameRE.MatchString(p) {
			return Scope{}, fmt.Errorf("scope %q: %q is not a name ([a-z][a-z0-9_]*, at most 32)", s, p)
		}
	}
	var sc Scope
	sc.Org = parts[0]
	if len(parts) > 1 {
		sc.Project = parts[1]
	}
	if len(parts) > 2 {
		sc.Env = parts[2]
	}
	return sc, nil
}

func (s Scope) String() string {
	switch {
	case s.Org == "":
		return "*"
	case s.Project == "":
		return s.Org
	case s.Env == "":
		return s.Org + "/" + s.Project
	}
	return s.Org + "/" + s.Project + "/" + s.Env
}

// Admin says whether the scope is everything.
func (s Scope) Admin() bool { return s.Org == "" }

// Holds says whether org/project/env lies inside the scope.
func (s Scope) Holds(org, project, env string) bool {
	return (s.Org == "" || s.Org == org) && (s.Project == "" || s.Project == project) && (s.Env == "" || s.Env == env)
}

// Desired is one declared pipeline, resolved: its place, its spec, the
// rendered `tidemark run` config and that config's checksum.
type Desired struct {
	Org, Project, Env string
	Spec              PipelineSpec
	Rendered          []byte
	Checksum          string
}

// Path is org/project/env/name.
func (d Desired) Path() string { return d.Org + "/" + d.Project + "/" + d.Env + "/" + d.Spec.Name }

// Layout decides where each environment's data lands: the control plane's
// part of every rendered config.
type Layout struct {
	// LakeRoot holds one warehouse per pipeline under
	// <LakeRoot>/<org>/<project>/<env>/ (the environment's prefix).
	LakeRoot string
}

// Warehouse is the pipeline's warehouse, under its environment's prefix.
func (l Layout) Warehouse(org, project, env, name string) string {
	return filepath.Join(l.LakeRoot, org, project, env, name)
}

// SlotName is the replication slot (and publication) of a pipeline: unique
// per environment, so two environments capturing one database never share
// a slot. At most 63 bytes.
func SlotName(org, project, env, name string) string {
	s := "tidemark_" + org + "_" + project + "_" + env + "_" + name
	if len(s) <= 63 {
		return s
	}
	sum := sha256.Sum256([]byte(org + "/" + project + "/" + env + "/" + name))
	return s[:50] + "_" + hex.EncodeToString(sum[:])[:12]
}

// TopicPrefix is the Kafka topic prefix of a pipeline with a Kafka sink.
func TopicPrefix(org, project, env, name string) string {
	return org + "." + project + "." + env + "." + name
}

// Resolve checks a declaration against the caller's scope and renders each
// pipeline's config. Every problem is reported, each naming its entry.
// It returns the declared environments (org/project/env) and the pipelines.
func (l Layout) Resolve(d *Declaration, scope Scope) ([]Scope, []Desired, error) {
	var errs []error
	bad := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, a...)))
	}
	var envs []Scope
	var out []Desired
	seen := map[string]bool{}
	for _, o := range d.Organisations {
		if !nameRE.MatchString(o.Name) {
			bad("organisation "+o.Name, "name must match [a-z][a-z0-9_]{0,31}")
			continue
		}
		for _, p := range o.Projects {
			if !nameRE.MatchString(p.Name) {
				bad(o.Name+"/"+p.Name, "project name must match [a-z][a-z0-9_]{0,31}")
				continue
			}
			for _, e := range p.Environments {
				ep := o.Name + "/" + p.Name + "/" + e.Name
				if !nameRE.MatchString(e.Name) {
					bad(ep, "environment name must match [a-z][a-z0-9_]{0,31}")
					continue
				}
				if seen[ep] {
					bad(ep, "environment declared twice")
					continue
				}
				seen[ep] = true
				if !scope.Holds(o.Name, p.Name, e.Name) {
					return nil, nil, &scopeError{env: ep, scope: scope}
				}
				envs = append(envs, Scope{Org: o.Name, Project: p.Name, Env: e.Name})
				names := map[string]bool{}
				for _, ps := range e.Pipelines {
					pp := ep + "/" + ps.Name
					if !nameRE.MatchString(ps.Name) {
						bad(pp, "pipeline name must match [a-z][a-z0-9_]{0,31}")
						continue
					}
					if names[ps.Name] {
						bad(pp, "pipeline declared twice")
						continue
					}
					names[ps.Name] = true
					des, err := l.render(o.Name, p.Name, e.Name, ps)
					if err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", pp, err))
						continue
					}
					out = append(out, des)
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return envs, out, nil
}

// scopeError: a declaration reaches outside the caller's token scope.
type scopeError struct {
	env   string
	scope Scope
}

func (e *scopeError) Error() string {
	return fmt.Sprintf("environment %s is outside this token's scope (%s)", e.env, e.scope)
}

// refRE matches a ${VAR} or ${VAR:-default} reference.
var refRE = regexp.MustCompile(`\$\{[^}]*\}`)

// checkReference refuses a connection string that carries a password in
// clear: with every ${…} reference taken out, nothing secret may remain.
func checkReference(key, v string) error {
	if v == "" {
		return nil
	}
	bare := refRE.ReplaceAllString(v, "")
	if bare == "" {
		return nil
	}
	if config.NewSecret(bare).HasPassword() {
		return fmt.Errorf("%w: %s carries a password in clear (%s); give it by reference: ${VAR} (from serve's environment) or source_file",
			ErrInlineSecret, key, config.NewSecret(v))
	}
	return nil
}

func (l Layout) render(org, project, env string, ps PipelineSpec) (Desired, error) {
	if ps.Source == "" && ps.SourceFile == "" {
		return Desired{}, errors.New("source: required (a ${VAR} reference, or source_file)")
	}
	if ps.Source != "" && ps.SourceFile != "" {
		return Desired{}, errors.New("source and source_file are both set; keep one")
	}
	if err := checkReference("source", ps.Source); err != nil {
		return Desired{}, err
	}
	if err := checkReference("sink", ps.Sink); err != nil {
		return Desired{}, err
	}
	keys := make([]string, 0, len(ps.Settings))
	for k := range ps.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if why, ok := ownedKeys[k]; ok {
			return Desired{}, fmt.Errorf("settings.%s: set by the control plane (%s), not by a pipeline entry", k, why)
		}
		if s, ok := ps.Settings[k].(string); ok {
			if err := checkReference("settings."+k, s); err != nil {
				return Desired{}, err
			}
		}
	}
	trig := map[string]bool{}
	for i, t := range ps.Triggers {
		if !nameRE.MatchString(t.Name) || trig[t.Name] {
			return Desired{}, fmt.Errorf("triggers[%d]: name %q: want a unique [a-z][a-z0-9_]{0,31}", i, t.Name)
		}
		trig[t.Name] = true
		if t.On != EventSnapshotCompleted {
			return Desired{}, fmt.Errorf("triggers.%s.on: want %s, got %q", t.Name, EventSnapshotCompleted, t.On)
		}
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Desired{}, fmt.Errorf("triggers.%s.url: want an http(s) URL", t.Name)
		}
		if u.User != nil {
			return Desired{}, fmt.Errorf("%w: triggers.%s.url carries credentials", ErrInlineSecret, t.Name)
		}
	}
	// The rendered config: the entry's keys, then what the control plane decides.
	m := map[string]any{}
	for k, v := range ps.Settings {
		m[k] = v
	}
	m["name"] = ps.Name
	m["warehouse"] = l.Warehouse(org, project, env, ps.Name)
	src := map[string]any{}
	switch ps.SourceType {
	case "", config.SourcePostgres:
		slot := SlotName(org, project, env, ps.Name)
		src["type"], src["slot"], src["publication"] = config.SourcePostgres, slot, slot
	case config.SourceMySQL:
		src["type"] = config.SourceMySQL
	default:
		return Desired{}, fmt.Errorf("source_type: want postgres or mysql, got %q", ps.SourceType)
	}
	if ps.Source != "" {
		src["url"] = ps.Source
	} else {
		m["source_file"] = ps.SourceFile
	}
	m["source"] = src
	if len(ps.Tables) > 0 {
		m["tables"] = ps.Tables
	}
	if len(ps.Lake) > 0 {
		m["lake"] = ps.Lake
	}
	if ps.Sink != "" {
		m["sink"] = ps.Sink
		m["topic_prefix"] = TopicPrefix(org, project, env, ps.Name)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# rendered by tidemark serve for %s/%s/%s/%s; do not edit\n", org, project, env, ps.Name)
	var doc yaml.Node
	if err := doc.Encode(m); err != nil {
		return Desired{}, fmt.Errorf("render: %w", err)
	}
	quoteReferences(&doc)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return Desired{}, fmt.Errorf("render: %w", err)
	}
	if err := enc.Close(); err != nil {
		return Desired{}, fmt.Errorf("render: %w", err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return Desired{Org: org, Project: project, Env: env, Spec: ps, Rendered: buf.Bytes(), Checksum: hex.EncodeToString(sum[:])}, nil
}

// quoteReferences double-quotes every value holding a ${VAR} reference:
// expansion is textual, and a quoted value stays one value whatever the
// variable holds (docs/configuration.md).
func quoteReferences(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		n.Style = yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		quoteReferences(c)
	}
}

// CheckRendered validates a rendered config the way `tidemark run` will
// (unknown keys, values, the source URL after ${VAR} expansion from this
// process's environment: a reference serve cannot resolve fails the apply,
// naming the variable, not the pipeline's start).
func CheckRendered(dir string, d Desired) error {
	f, err := os.CreateTemp(dir, "check-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(d.Rendered); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	cfg, err := config.Load(f.Name())
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		// The messages name the temporary file: name the pipeline instead.
		msg := strings.ReplaceAll(err.Error(), f.Name(), "rendered config")
		return fmt.Errorf("%s: %s", d.Path(), config.RedactURL(msg))
	}
	return nil
}
