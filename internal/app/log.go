package app

import (
	"context"
	"log/slog"

	"github.com/tidemark/tidemark/internal/config"
)

// redactHandler scrubs every message and string or error attribute of
// anything that looks like a connection string's password, and of the
// configured secrets verbatim (ARCHITECTURE §1, rule 7).
type redactHandler struct {
	h       slog.Handler
	secrets []config.Secret
}

func (r *redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r *redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, r.scrub(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r *redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = r.attr(a)
	}
	return &redactHandler{h: r.h.WithAttrs(clean), secrets: r.secrets}
}

func (r *redactHandler) WithGroup(name string) slog.Handler {
	return &redactHandler{h: r.h.WithGroup(name), secrets: r.secrets}
}

func (r *redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, r.scrub(v.String()))
	case slog.KindGroup:
		g := v.Group()
		out := make([]any, len(g))
		for i, x := range g {
			out[i] = r.attr(x)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, r.scrub(err.Error()))
		}
		return slog.String(a.Key, r.scrub(v.String()))
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (r *redactHandler) scrub(s string) string {
	s = config.RedactURL(s)
	if len(r.secrets) > 0 {
		s = config.RedactError(stringError(s), r.secrets...).Error()
	}
	return s
}

type stringError string

func (e stringError) Error() string { return string(e) }
