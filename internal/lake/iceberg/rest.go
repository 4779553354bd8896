package iceberg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog/rest"

	"github.com/tidemark/tidemark/internal/fault"
)

// ErrCatalogUnreachable is fault.ErrCatalogUnreachable: the Iceberg REST
// catalog did not answer, or refused tidemark's credentials.
var ErrCatalogUnreachable = fault.ErrCatalogUnreachable

// openREST opens the Iceberg REST catalog at uri for the warehouse wh
// (whURL: its file:// or s3:// URL, under which tidemark places tables),
// with ioProps for the FileIO of the tables' files.
//
// The URL is rest+http(s)://[client-id:client-secret@]host:port[/path]
// [?warehouse=NAME]: the REST API is at http(s)://host:port/path/v1/…;
// client-id:client-secret, if given, are OAuth2 client credentials
// (exchanged at the catalog's token endpoint, the Iceberg REST spec's
// default); warehouse is passed to the catalog's /v1/config (a catalog
// name, for servers that host several). Neither the credentials nor the
// URL's query appear in errors.
func openREST(ctx context.Context, uri, wh, whURL string, ioProps map[string]string) (*Catalog, error) {
	u, err := url.Parse(strings.TrimPrefix(uri, "rest+"))
	if err != nil || u.Host == "" {
		return nil, fault.With(fault.ErrBadConfig, "catalog: not a valid rest+http(s)://host:port[/path] URL", nil)
	}
	var secrets []string
	opts := []rest.Option{}
	if u.User != nil {
		id := u.User.Username()
		secret, _ := u.User.Password()
		if secret != "" {
			secrets = append(secrets, secret, url.QueryEscape(secret), url.PathEscape(secret))
		}
		opts = append(opts, rest.WithCredential(id+":"+secret))
	}
	q := u.Query()
	if w := q.Get("warehouse"); w != "" {
		opts = append(opts, rest.WithWarehouseLocation(w))
	}
	base := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/")}
	where := base.String()
	props := iceberggo.Properties{}
	for k, v := range ioProps {
		props[k] = v
	}
	if len(props) > 0 {
		opts = append(opts, rest.WithAdditionalProps(props))
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cat, err := rest.NewCatalog(octx, CatalogName, base.String(), opts...)
	if err != nil {
		return nil, redact(restOpenError(err, where), secrets...)
	}
	return &Catalog{cat: cat, warehouse: wh, warehouseURL: whURL, where: where, props: props}, nil
}

// restOpenError names why the REST catalog at where could not be opened.
func restOpenError(err error, where string) error {
	msg := err.Error()
	var nerr net.Error
	switch {
	case errors.As(err, &nerr), strings.Contains(msg, "connection refused"), strings.Contains(msg, "no such host"),
		errors.Is(err, context.DeadlineExceeded):
		return fault.With(ErrCatalogUnreachable, fmt.Sprintf("cannot reach the Iceberg REST catalog at %s: check --catalog (rest+http(s)://host:port[/path]) and that the catalog server is running", where), err)
	case errors.Is(err, rest.ErrUnauthorized), errors.Is(err, rest.ErrForbidden), errors.Is(err, rest.ErrOAuthError):
		return fault.With(ErrCatalogUnreachable, fmt.Sprintf("the Iceberg REST catalog at %s refused tidemark's credentials: check the client-id:client-secret in --catalog", where), err)
	case errors.Is(err, rest.ErrRESTError):
		return fault.With(ErrCatalogUnreachable, fmt.Sprintf("%s did not answer as an Iceberg REST catalog (GET /v1/config): check the URL's path in --catalog", where), err)
	}
	return fmt.Errorf("iceberg: open the REST catalog %s: %w", where, err)
}
