package iceberg

import (
	"context"

	iceberggo "github.com/apache/iceberg-go"
)

// CurrentDataFiles lists the data files of t's current snapshot (tests
// check the metrics the writer recorded).
func CurrentDataFiles(ctx context.Context, t *Table) ([]iceberggo.DataFile, error) {
	tasks, err := t.current().Scan().PlanFiles(ctx)
	if err != nil {
		return nil, err
	}
	var out []iceberggo.DataFile
	for _, task := range tasks {
		out = append(out, task.File)
	}
	return out, nil
}
