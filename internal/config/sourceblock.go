package config

import (
	"fmt"
	"reflect"

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
// and at the top level is an error naming both.
func (d *decoder) foldSourceBlock() {
	b := d.block
	if b == nil {
		return
	}
	c := d.cfg
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
