package gormfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/store/gormfence"
	"github.com/glebarez/sqlite"
	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/schema"
)

// The databases the tests run on: SQLite always (a file in the test's temporary
// directory, pure Go); PostgreSQL at FENCING_DATABASE_URL and MariaDB or MySQL at
// FENCING_MARIADB_DSN (go-sql-driver's form, root@tcp(127.0.0.1:3306)/test) when set.
// A test skips a server whose variable is unset or that does not answer, unless
// FENCING_REQUIRE_POSTGRES=1 or FENCING_REQUIRE_MARIADB=1, which make it fail.
const (
	envDatabaseURL     = "FENCING_DATABASE_URL"
	envRequirePostgres = "FENCING_REQUIRE_POSTGRES"
	envMariaDSN        = "FENCING_MARIADB_DSN"
	envRequireMaria    = "FENCING_REQUIRE_MARIADB"
)

// backend is a database kind the tests run on.
type backend struct {
	name string
	// open returns a new *gorm.DB whose tables are prefixed uniquely for the test.
	open func(t *testing.T, prefix string) *gorm.DB
	// sqlDB opens a database/sql handle, for store.Fences's own tests; found selects
	// MySQL's clientFoundRows=true.
	sqlDB func(t *testing.T, found bool) *sql.DB
}

var backends = []backend{
	{"sqlite", openSQLite, sqliteSQL},
	{"postgres", openPostgres, postgresSQL},
	{"mariadb", openMaria, mariaSQL},
}

// forEachBackend runs fn as a subtest on each backend, skipping the absent servers.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

// prefix returns a table prefix unique to this run.
func prefix() string {
	return fmt.Sprintf("fk_gf_%d_%x_", os.Getpid(), rand.Uint32())
}

// newDB opens b with the plugin (built with opts) and migrates models into tables of
// a prefix of the test's own, dropped when the test ends.
func newDB(t *testing.T, b backend, opts []gormfence.Option, models ...any) *gorm.DB {
	t.Helper()
	db := b.open(t, prefix())
	if err := db.Use(gormfence.New(opts...)); err != nil {
		t.Fatalf("Use: %v", err)
	}
	if err := db.AutoMigrate(models...); err != nil {
		t.Fatalf("AutoMigrate: %v", err)
	}
	t.Cleanup(func() {
		if err := db.WithContext(context.Background()).Migrator().DropTable(models...); err != nil {
			t.Errorf("drop tables: %v", err)
		}
	})
	return db
}

func gormConfig(prefix string) *gorm.Config {
	return &gorm.Config{
		NamingStrategy: schema.NamingStrategy{TablePrefix: prefix},
		Logger:         logger.Discard,
	}
}

func openSQLite(t *testing.T, prefix string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(sqlite.Open(sqlitePath(t)), gormConfig(prefix))
	if err != nil {
		t.Fatalf("open SQLite: %v", err)
	}
	closeOnCleanup(t, db)
	return db
}

// sqlitePath is a database file of the test's own; writers wait for each other up to
// 10 seconds.
func sqlitePath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "test.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
}

func sqliteSQL(t *testing.T, _ bool) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqlitePath(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openPostgres(t *testing.T, prefix string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(postgres.Open(serverDSN(t, envDatabaseURL, envRequirePostgres)), gormConfig(prefix))
	if err != nil {
		t.Fatalf("open PostgreSQL: %v", err)
	}
	closeOnCleanup(t, db)
	return db
}

func postgresSQL(t *testing.T, _ bool) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", serverDSN(t, envDatabaseURL, envRequirePostgres))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openMaria(t *testing.T, prefix string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(mysql.Open(mariaDSN(t, false)), gormConfig(prefix))
	if err != nil {
		t.Fatalf("open MariaDB: %v", err)
	}
	closeOnCleanup(t, db)
	return db
}

func mariaSQL(t *testing.T, found bool) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", mariaDSN(t, found))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// mariaDSN is FENCING_MARIADB_DSN with clientFoundRows set to found (the driver's
// default, false, unless found).
func mariaDSN(t *testing.T, found bool) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(serverDSN(t, envMariaDSN, envRequireMaria))
	if err != nil {
		t.Fatalf("%s: %v", envMariaDSN, err)
	}
	cfg.ClientFoundRows = found
	cfg.ParseTime = true
	return cfg.FormatDSN()
}

// serverDSN returns the DSN in env, skipping t when it is unset or its server does not
// answer a TCP connection within 3 seconds, unless require=1, which fails t instead.
func serverDSN(t testing.TB, env, require string) string {
	t.Helper()
	must := os.Getenv(require) == "1"
	dsn := os.Getenv(env)
	if dsn == "" {
		if must {
			t.Fatalf("%s=1 but %s is not set", require, env)
		}
		t.Skipf("skipping: set %s to run on this server", env)
	}
	if addr := hostPort(dsn); addr != "" {
		if err := dial(t.Context(), addr); err != nil {
			if must {
				t.Fatalf("%s does not answer: %v; %s=1 requires it", addr, err, require)
			}
			t.Skipf("skipping: %s does not answer: %v; set %s=1 to fail instead", addr, err, require)
		}
	}
	return dsn
}

// hostPort finds host:port in a postgres:// URL or a go-sql-driver DSN.
func hostPort(dsn string) string {
	if cfg, err := gomysql.ParseDSN(dsn); err == nil && !strings.Contains(dsn, "://") {
		return cfg.Addr
	}
	if i := strings.Index(dsn, "@"); i >= 0 {
		rest := dsn[i+1:]
		if j := strings.IndexAny(rest, "/?"); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	return ""
}

func closeOnCleanup(t *testing.T, db *gorm.DB) {
	t.Helper()
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
}

// dial checks that addr accepts a TCP connection.
func dial(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// reopen returns another *gorm.DB on db's connections and tables, without plugins.
func reopen(t *testing.T, db *gorm.DB) *gorm.DB {
	t.Helper()
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	var d gorm.Dialector
	switch db.Dialector.Name() {
	case "sqlite":
		d = &sqlite.Dialector{Conn: sqlDB}
	case "postgres":
		d = postgres.New(postgres.Config{Conn: sqlDB})
	default:
		d = mysql.New(mysql.Config{Conn: sqlDB})
	}
	name := db.NamingStrategy.TableName("Order")
	other, err := gorm.Open(d, gormConfig(name[:len(name)-len("orders")]))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	return other
}
