package config

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// sourceBlock is the typed form of the source: key,
//
//	source:
//	  type: postgres          # or mysql
//	  url: postgres://...
//	  slot: tidemark_shop     # postgres only
//	  publication: tidemark_shop
//
// which the file may give instead of the plain connection string. It is
// folded into the settings the rest of tidemark reads (Source, Slot,
// Publication), so a source-specific key has one home per source, while
// the top-level slot: and publication: keep working (deprecated). Each of
// its keys may also be left out; flags still override them.
type sourceBlock struct {
	Type        string `yaml:"type"`
	URL         Secret `yaml:"url"`
	Slot        string `yaml:"slot"`
	Publication string `yaml:"publication"`

	set map[string]origin // the block's keys given, by path (source.url, ...)
}

// sourceTypes are the values of source.type.
var sourceTypes = []string{SourcePostgres, SourceMySQL}

// sourceBlock reads a mapping under source:. Errors name source.<key>.
func (d *decoder) sourceBlock(n *yaml.Node) {
	b := &sourceBlock{}
	sub := &decoder{file: d.file, cfg: &Config{}}
	sub.mapping(n, reflect.ValueOf(b).Elem(), "source")
	d.errs = append(d.errs, sub.errs...)
	b.set = sub.cfg.set
	switch b.Type {
	case "", SourcePostgres, SourceMySQL:
	default:
		d.fail(n, "source.type", fmt.Sprintf("must be one of %v, got %s", sourceTypes, showValue(b.Type)))
	}
	d.block = b
}

// foldSourceBlock moves the typed source block into the settings it
// stands for, once the whole file is read: a key given both in the block
// and at the top level is an error naming both. It first notes the
// deprecated top-level keys the file gave (Config.Deprecations).
func (d *decoder) foldSourceBlock() {
	c := d.cfg
	b := d.block
	// The deprecated keys the file itself gave, read before fold marks
	// the top-level keys as set on behalf of the block. For a MySQL
	// source their new spelling is itself an error: the key has no
	// meaning there, so the file gets an error saying to remove it.
	mysql := c.SourceType() == SourceMySQL ||
		(b != nil && (b.Type == SourceMySQL || isMySQLURL(b.URL.Reveal())))
	for _, k := range deprecatedKeys {
		o, ok := c.set[k.key]
		switch {
		case !ok:
		case mysql:
			d.errs = append(d.errs, &Error{Path: k.key, File: d.file, Line: o.line,
				Msg: "is a PostgreSQL setting; a MySQL source has no " + k.key + ": remove the key (the binlog reader's identity is mysql.server_id)"})
		default:
			c.Deprecations = append(c.Deprecations, Deprecation{Key: k.key, Use: k.use, File: d.file, Line: o.line})
		}
	}
	if b == nil {
		return
	}
	if b.Type == SourceMySQL {
		for _, k := range []string{"slot", "publication"} {
			if o, ok := b.set["source."+k]; ok {
				d.errs = append(d.errs, &Error{Path: "source." + k, File: d.file, Line: o.line,
					Msg: "is a PostgreSQL setting; a source of type: mysql has no " + k})
			}
		}
	}
	// fold moves source.<key> to the top-level key it stands for.
	fold := func(key, top string, give func()) {
		o, inBlock := b.set["source."+key]
		if !inBlock {
			return
		}
		if prev, ok := c.set[top]; ok {
			d.errs = append(d.errs, &Error{Path: "source." + key, File: d.file, Line: o.line,
				Msg: fmt.Sprintf("set twice: here and as the top-level %s: (line %d); keep source.%s (the top-level key is deprecated)", top, prev.line, key)})
			return
		}
		give()
		c.markSet(top, o)
	}
	fold("url", "source", func() { c.Source = b.URL })
	fold("slot", "slot", func() { c.Slot = b.Slot })
	fold("publication", "publication", func() { c.Publication = b.Publication })
	if o, ok := b.set["source.type"]; ok {
		c.sourceType = b.Type
		c.markSet("source.type", o)
	}
}

// deprecatedKeys are the top-level keys that have a new spelling in the
// source block.
var deprecatedKeys = []struct{ key, use string }{
	{"slot", "source.slot"},
	{"publication", "source.publication"},
}

// Deprecation is a deprecated key the config file gave: Key (its YAML
// path), at File:Line, is now spelled Use. It never holds the key's value,
// which may be a secret.
type Deprecation struct {
	Key  string // "slot"
	Use  string // "source.slot"
	File string
	Line int // 0 when unknown
}

// String is "file:line: slot: is deprecated; use source.slot instead".
func (d Deprecation) String() string {
	e := &Error{Path: d.Key, File: d.File, Line: d.Line, Msg: "is deprecated; use " + d.Use + " instead (the old key still works)"}
	return strings.TrimPrefix(e.Error(), "config: ")
}

// checkSourceType: source.type, when given, agrees with the connection
// string the source came from (file, flag, file or environment).
func (c *Config) checkSourceType(k *checker) {
	if c.sourceType == "" || c.Source.IsZero() {
		return
	}
	if got := c.SourceType(); got != c.sourceType {
		k.bad("source.type", "is %s, but the source connection string is a %s one", c.sourceType, got)
	}
}
