package postgres

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
)

func TestReservedColumns(t *testing.T) {
	for name, want := range map[string]bool{
		"cdc_op": true, "cdc_deleted": true, "cdc_flag": true, "CDC_TS": true, "Cdc_x": true, "cdc_": true,
		"cdc": false, "cdcop": false, "x_cdc_op": false, "cdc-op": false, "": false, "çdc_op": false,
	} {
		if got := IsReservedColumn(name); got != want {
			t.Errorf("IsReservedColumn(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestCheckTableName(t *testing.T) {
	for _, id := range []change.TableID{
		{Schema: "public", Name: "select"}, {Schema: "Mixed Case", Name: "Ünïcødé 表"}, {Schema: `sch"q`, Name: `ta"ble`},
		{Schema: "_building_x", Name: "t"}, {Schema: "public", Name: "_building"},
	} {
		if err := checkTableName(id); err != nil {
			t.Errorf("checkTableName(%v) = %v, want nil", id, err)
		}
	}
	for _, id := range []change.TableID{
		{Schema: "a.b", Name: "t"}, {Schema: "public", Name: "t.x"}, {Schema: "public", Name: "a/b"},
		{Schema: "public", Name: "a\nb"}, {Schema: "_building", Name: "t"},
	} {
		err := checkTableName(id)
		if !errors.Is(err, fault.ErrUnsupportedName) || fault.ExitCode(err) != fault.ExitConfig {
			t.Errorf("checkTableName(%q) = %v, want unsupported_name (exit 2)", id, err)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("checkTableName(%q): the message has a raw newline: %q", id, err)
		}
	}
	err := elementCollision(change.TableID{Schema: "public", Name: "t"}, []string{"id", "tags", "tags.element"}, func(c string) bool { return c == "tags" }, true)
	if !errors.Is(err, fault.ErrColumnCollision) {
		t.Errorf("elementCollision = %v, want column_collision", err)
	}
	if err := elementCollision(change.TableID{Schema: "public", Name: "t"}, []string{"id", "tags", "tags.element"}, func(string) bool { return false }, true); err != nil {
		t.Errorf("elementCollision without a list = %v, want nil", err)
	}
}
