package dashboard_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fencekit/fencekit/dashboard"
	"github.com/fencekit/fencekit/fencing"
)

// The browser test's variables.
const (
	// envRequireBrowser makes TestBrowser fail, rather than skip, without Chromium (.ci/browser
	// sets it).
	envRequireBrowser = "FENCING_REQUIRE_BROWSER"
	// envChromium names the browser to run, a path or a name on PATH; default: chromium,
	// chromium-browser, google-chrome, whichever is found first.
	envChromium = "FENCING_CHROMIUM"
	// envScreenshots makes TestBrowser write the screenshots that docs/ops.md shows, to
	// docs/img/ops-list.png and docs/img/ops-detail.png.
	envScreenshots = "FENCING_SCREENSHOTS"
)

// chromium returns the browser to run, or skips t, saying why, when there is none and
// FENCING_REQUIRE_BROWSER is not set.
func chromium(t *testing.T) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser", "google-chrome"}
	if name := os.Getenv(envChromium); name != "" {
		names = []string{name}
	}
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv(envRequireBrowser) != "" {
		t.Fatalf("%s is set, but no browser is found (looked for %s): apt-get install chromium, or set %s", envRequireBrowser, strings.Join(names, ", "), envChromium)
	}
	t.Skipf("no browser found (looked for %s): apt-get install chromium to run this test; %s=1 makes it fail instead", strings.Join(names, ", "), envRequireBrowser)
	return ""
}

// browser returns a context of a new tab of a headless Chromium of its own (an empty
// profile, no network but this machine's), closed when the test ends, and bounded to a
// minute in all.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("force-device-scale-factor", "1"),
		chromedp.Flag("lang", "en-US"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc(); cancel() })
	return bctx
}

// TestBrowser drives the page in headless Chromium, as an operator would: a lock held with
// the label export-42, with a labelled waiter behind it, shows on the list; its detail
// shows both, and picks up a waiter queued after it was loaded without being reloaded; the
// Force release button, once confirmed, frees the holder: the page comes back without
// export-42, the waiter holds the resource with a higher token, and the old holder's
// Release fails with ErrNotHeld. With FENCING_SCREENSHOTS=1 it writes the screenshots of
// docs/ops.md.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, dashboard.WithTitle("orders service · locks"), dashboard.WithRefresh(500*time.Millisecond))
	minutes := func(n int) fencing.CallOption { return fencing.WithTTL(time.Duration(n) * time.Minute) }
	export := e.hold(t, "export/2026-12", fencing.WithLabel("export-42"), minutes(5))
	granted := e.queue(t, "export/2026-12", 1, fencing.WithLabel("export-43"))
	e.hold(t, "order-42", fencing.WithLabel("req 7f3a9c"), minutes(1))
	e.hold(t, "report/2026-11", fencing.Shared(), fencing.WithLabel("reader-a"), minutes(10))
	e.hold(t, "report/2026-11", fencing.Shared(), fencing.WithLabel("reader-b"), minutes(8))
	e.hold(t, "tenant-7", fencing.WithLimit(3), fencing.WithLabel("invoice-1001"), minutes(4))
	e.hold(t, "tenant-7", fencing.WithLimit(3), fencing.WithLabel("invoice-1002"), minutes(3))
	e.hold(t, "invoice{2026-11}", minutes(2))
	base := e.srv.URL + mount + "/"

	// The list.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base),
		chromedp.WaitVisible(chromedp.Search(`//span[@class="label" and text()="export-42"]`)),
		chromedp.WaitVisible(chromedp.Search(`//span[@class="label" and text()="export-43"]`)),
	); err != nil {
		t.Fatalf("list: %v", err)
	}
	screenshot(t, ctx, "ops-list.png")

	// The detail, through the list's link.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.Search(`//a[@class="resource" and text()="export/2026-12"]`)),
		chromedp.WaitVisible(chromedp.Search(`//h1[text()="export/2026-12"]`)),
		chromedp.WaitVisible(chromedp.Search(`//table[@class="holders"]//span[text()="export-42"]`)),
		chromedp.WaitVisible(chromedp.Search(`//table[@class="waiters"]//span[text()="export-43"]`)),
	); err != nil {
		t.Fatalf("detail: %v", err)
	}
	// It refreshes on its own: a waiter queued now shows without a reload, which would
	// drop the mark set in the page.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	e.queue(t, "export/2026-12", 2, fencing.WithLabel("nightly-sync"), fencing.Shared())
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(`//table[@class="waiters"]//span[text()="nightly-sync"]`))); err != nil {
		t.Fatalf("the detail did not refresh: %v", err)
	}
	if same, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded === true`)); err != nil || !same {
		t.Errorf("the detail was reloaded to refresh (%v), not refreshed in place", err)
	}
	screenshot(t, ctx, "ops-detail.png")

	// Force release, confirmed in the dialog.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	confirmed := make(chan string, 1)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			confirmed <- ev.Message
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			return
		}
	}()
	button := `//form[input[@name="token" and @value="` + itoa(export.Token()) + `"]]/button`
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.Search(button)),
		chromedp.WaitVisible(chromedp.Search(`//p[@class="notice"]`)),
	); err != nil {
		t.Fatalf("force release: %v", err)
	}
	if msg := <-confirmed; !strings.Contains(msg, "Force release token "+itoa(export.Token())+" of export/2026-12?") {
		t.Errorf("confirmation %q", msg)
	}
	next := <-granted
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(`//table[@class="holders"]//span[text()="export-43"]`))); err != nil {
		t.Fatalf("after the release: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "export-42") || !strings.Contains(text, "Released the holder with token "+itoa(export.Token())) {
		t.Errorf("after the release, the page reads:\n%s", text)
	}
	if next.Token() <= export.Token() {
		t.Errorf("the waiter got token %d, not above the released %d", next.Token(), export.Token())
	}
	if err := export.Release(context.Background()); !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("the old holder's Release: got %v, want ErrNotHeld", err)
	}

	// Back on the list: export-42 is gone, export-43 holds the resource.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.Search(`//a[text()="All locks"]`)),
		chromedp.WaitVisible(chromedp.Search(`//h1[text()="Locks"]`)),
		chromedp.WaitVisible(chromedp.Search(`//td//span[@class="label" and text()="export-43"]`)),
	); err != nil {
		t.Fatalf("list after the release: %v", err)
	}
	if text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("table.locks"))); err != nil || strings.Contains(text, "export-42") {
		t.Errorf("the list after the release (%v):\n%s", err, text)
	}
}

// screenshot writes the whole page to docs/img/name when FENCING_SCREENSHOTS is set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv(envScreenshots) == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join("..", "docs", "img", name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}
