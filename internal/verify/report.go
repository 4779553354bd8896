package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Write renders the report as "table" (a summary line per table, then the
// details of every table that is not equal) or "json" (the Report).
func (r *Report) Write(w io.Writer, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tSTATUS\tSOURCE_ROWS\tSILVER_ROWS\tCHUNKS\tDIFFERING_CHUNKS\tDIFFERENCES\tPOSITION\tSECONDS")
	for _, t := range r.Tables {
		diffs := fmt.Sprint(t.DifferencesTotal)
		if t.AtLeast {
			diffs = ">=" + diffs
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%.1f\n", t.Table, t.Status, t.SourceRows, t.SilverRows,
			t.Chunks, t.ChunksDiffering, diffs, dash(t.Position), t.Seconds)
	}
	if len(r.Tables) == 0 && len(r.BronzeOnly) == 0 {
		fmt.Fprintf(tw, "(no silver or bronze tables for source %s)\n", r.Source)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.NotCaptured {
		if _, err := fmt.Fprintf(w, "\n%s: not captured, not compared: %s\n", n.Table, n.Reason); err != nil {
			return err
		}
	}
	for _, n := range r.BronzeOnly {
		if _, err := fmt.Fprintf(w, "\n%s: bronze only, no silver to compare: %s\n", n.Table, n.Reason); err != nil {
			return err
		}
	}
	for _, t := range r.Tables {
		if t.Status == StatusEqual {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "\n%s: %s", t.Table, strings.ReplaceAll(t.Status, "_", " "))
		if t.Reason != "" {
			fmt.Fprintf(&b, ": %s", t.Reason)
		}
		b.WriteString("\n")
		if t.DifferencesTotal > 0 {
			more := ""
			if t.AtLeast {
				more = " (at least: verify stopped looking)"
			}
			fmt.Fprintf(&b, "  %d differing key(s)%s, first %d:\n", t.DifferencesTotal, more, len(t.Differences))
		}
		for _, d := range t.Differences {
			fmt.Fprintf(&b, "  key %s: %s", d.Key, strings.ReplaceAll(d.Kind, "_", " "))
			if d.SilverLSN != "" {
				fmt.Fprintf(&b, " (silver row at %s)", d.SilverLSN)
			}
			b.WriteString("\n")
			for _, c := range d.Columns {
				fmt.Fprintf(&b, "      %s: source %s | silver %s\n", c.Column, c.Source, c.Silver)
			}
		}
		if len(t.Unsettled) > 0 {
			fmt.Fprintf(&b, "  keys that kept changing (%d): %s\n", len(t.Unsettled), strings.Join(first(t.Unsettled, 10), "; "))
		}
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}
