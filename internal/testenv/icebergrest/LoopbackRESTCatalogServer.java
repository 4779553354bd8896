// LoopbackRESTCatalogServer runs Apache Iceberg's reference REST catalog
// server (org.apache.iceberg.rest.RESTCatalogServer, from
// iceberg-open-api's test fixtures) the way that class's main does —
// the backend catalog built by CatalogUtil from the CATALOG_* environment
// variables (RCKUtils.environmentCatalogConfig: CATALOG_S3_ENDPOINT is
// s3.endpoint, CATALOG_IO__IMPL is io-impl) and the fixture's
// RESTServerCatalogAdapter — but listening on 127.0.0.1 only, on the port
// given as the first argument (the fixture binds every interface).
//
// It is in the fixture's package to reach its package-private adapter.
// scripts/setup-test-env.sh compiles it; internal/testenv starts it.
package org.apache.iceberg.rest;

import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.server.handler.gzip.GzipHandler;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

public class LoopbackRESTCatalogServer {
  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    Map<String, String> cfg = new java.util.HashMap<>(RCKUtils.environmentCatalogConfig());
    cfg.putIfAbsent("catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog");
    cfg.putIfAbsent("jdbc.schema-version", "V1");
    Catalog catalog = CatalogUtil.buildIcebergCatalog("rest_backend", cfg, new Configuration());
    RESTCatalogAdapter adapter = new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(catalog, cfg));
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
    context.insertHandler(new GzipHandler());
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost("127.0.0.1");
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    System.out.println("tidemark-rest-catalog listening on 127.0.0.1:" + connector.getLocalPort());
    server.join();
  }
}
