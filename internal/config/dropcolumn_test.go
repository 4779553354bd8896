package config_test

import (
	"errors"
	"testing"

	"github.com/tidemark/tidemark/internal/config"
)

// TestDropColumnSetting: silver.drop_column defaults to keep, takes keep or
// drop from the file or --silver-drop-column, and any other value is a
// config error naming the key, the allowed values and the flag.
func TestDropColumnSetting(t *testing.T) {
	c, err := config.Resolve(newFlags(t, "--source", "postgres://u@h/shop"), "")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "drop_column (default)", c.Silver.DropColumn, "keep")
	eq(t, "DropColumns (default)", c.Silver.DropColumns(), false)

	file := writeFile(t, "source: postgres://u@h/shop\nsilver:\n  drop_column: Drop\n")
	if c, err = config.Resolve(newFlags(t), file); err != nil {
		t.Fatal(err)
	}
	eq(t, "drop_column (file)", c.Silver.DropColumn, "drop")
	eq(t, "DropColumns (file)", c.Silver.DropColumns(), true)

	if c, err = config.Resolve(newFlags(t, "--silver-drop-column", "keep"), file); err != nil {
		t.Fatal(err)
	}
	eq(t, "drop_column (flag over file)", c.Silver.DropColumn, "keep")

	_, err = config.Resolve(newFlags(t, "--silver-drop-column=delete"), file)
	want := `config: silver.drop_column: must be keep or drop, got "delete" (set by --silver-drop-column)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Path != "silver.drop_column" {
		t.Errorf("error %T %v: want a *config.Error for silver.drop_column", err, err)
	}
}
