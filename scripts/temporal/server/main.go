// Command taskgate-temporal-server runs a single-process Temporal server (frontend,
// history, matching and worker services in one process) on SQLite, for taskgate's
// Temporal engine tests only. It is pinned to one server release (see go.mod) and is
// never shipped.
//
// The store lives in memory unless -db-file names a file. The namespaces given with
// -namespace exist when the frontend starts answering, each with the custom search
// attributes given with -search-attribute.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/metrics"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
)

const clusterName = "active"

// listFlag collects a repeatable flag; each use may also hold a comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

type options struct {
	ip           string
	port         int
	httpPort     int
	historyPort  int
	matchingPort int
	workerPort   int
	metricsPort  int
	dbFile       string
	logLevel     string
	namespaces   listFlag
	searchAttrs  listFlag
	dynamic      listFlag
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "taskgate-temporal-server: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags() (*options, error) {
	o := &options{}
	flag.StringVar(&o.ip, "ip", "127.0.0.1", "address every service binds to")
	flag.IntVar(&o.port, "port", 17233, "frontend gRPC port")
	flag.IntVar(&o.httpPort, "http-port", 0, "frontend HTTP API port (default: port+10)")
	flag.IntVar(&o.historyPort, "history-port", 0, "history service gRPC port (default: port+1)")
	flag.IntVar(&o.matchingPort, "matching-port", 0, "matching service gRPC port (default: port+2)")
	flag.IntVar(&o.workerPort, "worker-port", 0, "worker service gRPC port (default: port+3)")
	flag.IntVar(&o.metricsPort, "metrics-port", 0, "Prometheus metrics port, path /metrics (default: port+20)")
	flag.StringVar(&o.dbFile, "db-file", "", "SQLite file for the store (default: in memory, lost on exit)")
	flag.StringVar(&o.logLevel, "log-level", "warn", "server log level: debug, info, warn, error")
	flag.Var(&o.namespaces, "namespace", "namespace to create at start (repeatable; default: default,taskgate-test)")
	flag.Var(&o.searchAttrs, "search-attribute", "custom search attribute NAME=TYPE on every namespace (repeatable; default: TaskgateArgsDigest=Keyword)")
	flag.Var(&o.dynamic, "dynamic-config", "dynamic config value KEY=JSON (repeatable)")
	flag.Parse()
	if flag.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", flag.Args())
	}
	if o.port <= 0 || o.port > 65535-20 {
		return nil, fmt.Errorf("-port %d is out of range", o.port)
	}
	for _, p := range []struct {
		v   *int
		off int
	}{{&o.httpPort, 10}, {&o.historyPort, 1}, {&o.matchingPort, 2}, {&o.workerPort, 3}, {&o.metricsPort, 20}} {
		if *p.v == 0 {
			*p.v = o.port + p.off
		}
	}
	if len(o.namespaces) == 0 {
		o.namespaces = listFlag{"default", "taskgate-test"}
	}
	if len(o.searchAttrs) == 0 {
		o.searchAttrs = listFlag{"TaskgateArgsDigest=Keyword"}
	}
	return o, nil
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

func searchAttributes(specs []string) (map[string]enumspb.IndexedValueType, error) {
	out := make(map[string]enumspb.IndexedValueType, len(specs))
	for _, spec := range specs {
		name, typ, ok := strings.Cut(spec, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("-search-attribute %q: want NAME=TYPE", spec)
		}
		v, err := enumspb.IndexedValueTypeFromString(typ)
		if err != nil || v == enumspb.INDEXED_VALUE_TYPE_UNSPECIFIED {
			return nil, fmt.Errorf("-search-attribute %q: unknown type %q", spec, typ)
		}
		out[name] = v
	}
	return out, nil
}

func dynamicConfig(specs []string) (dynamicconfig.StaticClient, error) {
	dc := dynamicconfig.StaticClient{
		// Visibility (list/count) calls are cheap on SQLite; tests list often.
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
	}
	for _, spec := range specs {
		key, raw, ok := strings.Cut(spec, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("-dynamic-config %q: want KEY=JSON", spec)
		}
		var v any
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			return nil, fmt.Errorf("-dynamic-config %q: value is not JSON: %w", spec, err)
		}
		dc[dynamicconfig.MakeKey(key)] = v
	}
	return dc, nil
}

// store prepares the SQLite store and creates the namespaces in it.
func store(o *options, attrs map[string]enumspb.IndexedValueType) (*config.SQL, error) {
	sql := &config.SQL{PluginName: sqliteplugin.PluginName}
	if o.dbFile == "" {
		// A shared-cache in-memory database: the plugin creates its schema on first
		// open, and keeps a connection so it lives as long as the process.
		sql.DatabaseName = fmt.Sprintf("taskgate-%d", rand.Int64())
		sql.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
	} else {
		sql.DatabaseName = o.dbFile
		sql.ConnectAttributes = map[string]string{"mode": "rwc"}
		if _, err := os.Stat(o.dbFile); errors.Is(err, os.ErrNotExist) {
			if err := sqliteschema.SetupSchema(sql); err != nil {
				return nil, fmt.Errorf("creating the schema in %s: %w", o.dbFile, err)
			}
		}
	}
	var nss []*sqliteschema.NamespaceConfig
	for _, name := range o.namespaces {
		ns, err := sqliteschema.NewNamespaceConfig(clusterName, name, false, attrs)
		if err != nil {
			return nil, fmt.Errorf("namespace %s: %w", name, err)
		}
		nss = append(nss, ns)
	}
	if err := sqliteschema.CreateNamespaces(sql, nss...); err != nil {
		return nil, fmt.Errorf("creating namespaces: %w", err)
	}
	return sql, nil
}

func serverConfig(o *options, sql *config.SQL) *config.Config {
	frontend := hostPort(o.ip, o.port)
	c := &config.Config{}
	c.Global.Membership.MaxJoinDuration = 30 * time.Second
	c.Global.Membership.BroadcastAddress = o.ip
	c.Global.Metrics = &metrics.Config{
		Prometheus: &metrics.PrometheusConfig{
			Framework:     metrics.FrameworkOpentelemetry, // read at scrape time: no reporting lag
			ListenAddress: hostPort(o.ip, o.metricsPort),
			HandlerPath:   "/metrics",
		},
	}
	c.Persistence.DefaultStore = "sqlite"
	c.Persistence.VisibilityStore = "sqlite"
	c.Persistence.NumHistoryShards = 1
	c.Persistence.DataStores = map[string]config.DataStore{"sqlite": {SQL: sql}}
	c.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             frontend,
				HTTPAddress:            hostPort(o.ip, o.httpPort),
				ClusterID:              "3f9c2b4e-5d1a-4c7e-9a60-0d7e1b2c4a58", // any fixed UUID
			},
		},
	}
	c.DCRedirectionPolicy.Policy = "noop"
	service := func(port, httpPort int) config.Service {
		var s config.Service
		s.RPC.GRPCPort = port
		s.RPC.HTTPPort = httpPort
		s.RPC.BindOnIP = o.ip
		return s
	}
	c.Services = map[string]config.Service{
		string(primitives.FrontendService): service(o.port, o.httpPort),
		string(primitives.HistoryService):  service(o.historyPort, 0),
		string(primitives.MatchingService): service(o.matchingPort, 0),
		string(primitives.WorkerService):   service(o.workerPort, 0),
	}
	c.Archival.History.State = "disabled"
	c.Archival.Visibility.State = "disabled"
	c.NamespaceDefaults.Archival.History.State = "disabled"
	c.NamespaceDefaults.Archival.Visibility.State = "disabled"
	c.PublicClient.HostPort = frontend
	return c
}

func run() error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	attrs, err := searchAttributes(o.searchAttrs)
	if err != nil {
		return err
	}
	dc, err := dynamicConfig(o.dynamic)
	if err != nil {
		return err
	}
	sql, err := store(o, attrs)
	if err != nil {
		return err
	}
	conf := serverConfig(o, sql)
	logger := log.NewZapLogger(log.BuildZapLogger(log.Config{Level: o.logLevel, Format: "json"}))
	authorizer, err := authorization.GetAuthorizerFromConfig(&conf.Global.Authorization)
	if err != nil {
		return fmt.Errorf("authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&conf.Global.Authorization, logger)
	if err != nil {
		return fmt.Errorf("claim mapper: %w", err)
	}
	hosts := map[primitives.ServiceName]static.Hosts{
		primitives.FrontendService: static.SingleLocalHost(hostPort(o.ip, o.port)),
		primitives.HistoryService:  static.SingleLocalHost(hostPort(o.ip, o.historyPort)),
		primitives.MatchingService: static.SingleLocalHost(hostPort(o.ip, o.matchingPort)),
		primitives.WorkerService:   static.SingleLocalHost(hostPort(o.ip, o.workerPort)),
	}
	server, err := temporal.NewServer(
		temporal.WithConfig(conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(hosts),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithDynamicConfigClient(dc),
	)
	if err != nil {
		return fmt.Errorf("building the server: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.Start(); err != nil {
		return fmt.Errorf("starting the server: %w", err)
	}
	fmt.Printf("taskgate-temporal-server: frontend %s, http %s, metrics http://%s/metrics, namespaces %s\n",
		hostPort(o.ip, o.port), hostPort(o.ip, o.httpPort), hostPort(o.ip, o.metricsPort), o.namespaces.String())
	<-ctx.Done()
	server.Stop()
	return nil
}
