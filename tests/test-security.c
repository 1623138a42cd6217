/*
 * test-security.c — who may connect, and what a remote client may read:
 * tls+tcp:// with a CA and certificates that openssl makes at test time
 * (server-only TLS, then mutual TLS), the auth token (over ipc, given as an
 * option or read from an owner-only file, and over TLS), the start-up
 * refusal of an open network listener, and LoadCheckpoint's path confined to
 * the state directory and checkpoint-dirs.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

typedef struct tls_daemon {
  daemon_t d;
  char certs[300], url[100];
} tls_daemon_t;

static void path_in(const tls_daemon_t *t, const char *file, char *out, size_t n) {
  snprintf(out, n, "%s/%s", t->certs, file);
}

/* the harness's ipc listener plus tls+tcp://127.0.0.1:PORT presenting
 * certs/<server>.pem; the clients dial localhost */
static void start_tls_as(tls_daemon_t *t, const char *server, int verify_clients, const char *token) {
  memset(t, 0, sizeof *t);
  snprintf(t->d.dir, sizeof t->d.dir, "/tmp/dqnd-sec-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(t->d.dir));
  snprintf(t->certs, sizeof t->certs, "%s/certs", t->d.dir);
  char mk[400];
  snprintf(mk, sizeof mk, "mkdir -p '%s'", t->certs);
  ck_assert_int_eq(system(mk), 0);
  make_certs(t->certs);
  int port = free_port();
  static char listen[100], cert[400], key[400], ca[400];
  snprintf(listen, sizeof listen, "tls+tcp://127.0.0.1:%d", port);
  snprintf(t->url, sizeof t->url, "tls+tcp://localhost:%d", port);
  char f[64];
  snprintf(f, sizeof f, "%s.pem", server);
  path_in(t, f, cert, sizeof cert);
  snprintf(f, sizeof f, "%s.key", server);
  path_in(t, f, key, sizeof key);
  path_in(t, "ca.pem", ca, sizeof ca);
  const char *extra[16] = {"--listen", NULL, "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca, NULL};
  int k = 8;
  if (verify_clients) extra[k++] = "--tls-verify-clients";
  if (token) extra[k++] = "--auth-token", extra[k++] = token;
  extra[k] = NULL;
  /* the harness's own ipc URL comes first in its argv; ours is added */
  extra[1] = listen;
  start_daemon_argv(&t->d, extra);
}

static void start_tls(tls_daemon_t *t, int verify_clients, const char *token) {
  start_tls_as(t, "server", verify_clients, token);
}

static int connect_tls_named(const tls_daemon_t *t, const char *ca, const char *cert, const char *key,
                             const char *server_name, dqnd_client_t **c, char *err, size_t n) {
  char pca[400] = "", pcert[400] = "", pkey[400] = "";
  if (ca) path_in(t, ca, pca, sizeof pca);
  if (cert) path_in(t, cert, pcert, sizeof pcert);
  if (key) path_in(t, key, pkey, sizeof pkey);
  dqnd_tls_opts_t o = {.ca = pca, .cert = pcert, .key = pkey, .server_name = server_name};
  return dqnd_connect_tls(t->url, 5000, &o, c, err, n);
}

static int connect_tls(const tls_daemon_t *t, const char *ca, const char *cert, const char *key, dqnd_client_t **c,
                       char *err, size_t n) {
  return connect_tls_named(t, ca, cert, key, NULL, c, err, n);
}

/* a refused handshake: the transport error, and the message names the cause */
static void refused_because(int rc, const char *err, const char *cause) {
  ck_assert_msg(rc == DQND_ETRANSPORT, "rc %d (%s), expected ETRANSPORT: %s", rc, dqnd_strerror(rc), err);
  ck_assert_msg(strstr(err, "TLS handshake failed") && strstr(err, cause), "expected '%s' in: %s", cause, err);
}

START_TEST(tls_server_only) {
  tls_daemon_t t;
  start_tls(&t, 0, "sekrit");
  ck_assert_msg(log_has(&t.d, "(TLS; any client may connect, requests need the auth token)"), "the log says who may connect");
  char err[1024];
  dqnd_client_t *c;
  /* the right CA: works; the token is still checked over TLS */
  ck_assert_msg(connect_tls(&t, "ca.pem", NULL, NULL, &c, err, sizeof err) == 0, "%s", err);
  int serving = 0;
  ck_assert_int_eq(dqnd_health(c, &serving, NULL), 16);
  ck_assert_msg(strstr(dqnd_last_error(c), "auth_token: missing"), "%s", dqnd_last_error(c));
  dqnd_set_token(c, "wrong");
  ck_assert_int_eq(dqnd_health(c, &serving, NULL), 16);
  ck_assert_msg(strstr(dqnd_last_error(c), "auth_token: wrong"), "%s", dqnd_last_error(c));
  dqnd_set_token(c, "sekrit");
  ck_assert_int_eq(dqnd_health(c, &serving, NULL), 0);
  ck_assert_int_eq(serving, 1);
  /* real work over TLS: a trainer, transitions, steps */
  ck_assert_int_eq(dqnd_create_trainer(c, "overtls", small_fields, N_SMALL, NULL, NULL), 0);
  batch_t b;
  make_batch(&b, 64, 1);
  ck_assert_int_eq(submit(c, "overtls", &b), 0);
  learner_stats_t st;
  ck_assert_int_eq(dqnd_step(c, "overtls", 3, &st), 0);
  ck_assert_int_eq((int)st.step, 3);
  dqnd_close(c);
  /* each refusal names its cause (the client's second look, tls_diag.c) */
  /* a CA that did not sign the daemon's certificate */
  int rc = connect_tls(&t, "other.pem", NULL, NULL, &c, err, sizeof err);
  refused_because(rc, err, "is not signed by the CA in tls-ca");
  ck_assert_msg(strstr(err, "issued by CN=dqnd CA"), "the issuer is named: %s", err);
  /* a name the daemon's certificate does not carry */
  rc = connect_tls_named(&t, "ca.pem", NULL, NULL, "elsewhere.example", &c, err, sizeof err);
  refused_because(rc, err, "host name mismatch");
  ck_assert_msg(strstr(err, "issued to DNS:localhost, not to 'elsewhere.example'"), "%s", err);
  /* no CA at all: a local error naming the option, before any connection */
  rc = connect_tls(&t, NULL, NULL, NULL, &c, err, sizeof err);
  ck_assert_int_eq(rc, DQND_EINVAL);
  ck_assert_msg(strstr(err, "tls-ca"), "%s", err);
  /* a plain tcp:// client on the TLS port gets nothing */
  char plain[120];
  snprintf(plain, sizeof plain, "tcp://%s", t.url + strlen("tls+tcp://"));
  if (dqnd_connect(plain, 1000, &c, err, sizeof err) == 0) {
    dqnd_set_token(c, "sekrit");
    ck_assert_int_lt(dqnd_health(c, &serving, NULL), 0);
    dqnd_close(c);
  }
  /* dqnctl takes the same options */
  char out[4096], args[1500];
  daemon_t via = t.d; /* run_ctl dials via.url */
  snprintf(via.url, sizeof via.url, "%s", t.url);
  snprintf(args, sizeof args, "--tls-ca %s/ca.pem --token sekrit list", t.certs);
  ck_assert_msg(run_ctl(&via, args, out, sizeof out) == 0, "%s", out);
  ck_assert_msg(strstr(out, "overtls"), "%s", out);
  snprintf(args, sizeof args, "--tls-ca %s/other.pem --token sekrit list", t.certs);
  ck_assert_int_eq(run_ctl(&via, args, out, sizeof out), 3);
  ck_assert_msg(strstr(out, "TLS handshake failed"), "%s", out);
  ck_assert_int_eq(stop_daemon(&t.d, SIGTERM), 0);
  rm_rf(t.d.dir);
}
END_TEST

/* a daemon presenting a certificate that has expired (old.pem: valid for no
 * time at all, made before the daemon started) */
START_TEST(tls_expired) {
  tls_daemon_t t;
  start_tls_as(&t, "old", 0, NULL);
  sleep(2); /* at least a whole second past its notAfter, whatever the start took */
  char err[1024];
  dqnd_client_t *c;
  int rc = connect_tls(&t, "ca.pem", NULL, NULL, &c, err, sizeof err);
  refused_because(rc, err, "the daemon's certificate (CN=localhost) expired on ");
  ck_assert_int_eq(stop_daemon(&t.d, SIGTERM), 0);
  rm_rf(t.d.dir);
}
END_TEST

START_TEST(tls_mutual) {
  tls_daemon_t t;
  start_tls(&t, 1, NULL);
  ck_assert_msg(log_has(&t.d, "clients need a certificate signed by tls-ca"), "the log says who may connect");
  char err[1024];
  dqnd_client_t *c;
  int serving = 0;
  /* no client certificate: refused, and the message asks for one */
  int rc = connect_tls(&t, "ca.pem", NULL, NULL, &c, err, sizeof err);
  refused_because(rc, err, "the daemon requires a client certificate");
  /* a certificate from another CA: refused, as not signed by the daemon's CA */
  rc = connect_tls(&t, "ca.pem", "stranger.pem", "stranger.key", &c, err, sizeof err);
  refused_because(rc, err, "refused this client's certificate");
  ck_assert_msg(strstr(err, "stranger.pem") && strstr(err, "not signed by the CA the daemon trusts"), "%s", err);
  /* a certificate the CA signed: served */
  ck_assert_msg(connect_tls(&t, "ca.pem", "client.pem", "client.key", &c, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(dqnd_health(c, &serving, NULL), 0);
  ck_assert_int_eq(serving, 1);
  dqnd_close(c);
  /* a key that does not match its certificate: no connection (mbed TLS
   * takes the pair as given; the daemon then refuses the handshake's
   * signature), and the message says which files disagree */
  rc = connect_tls(&t, "ca.pem", "client.pem", "stranger.key", &c, err, sizeof err);
  refused_because(rc, err, "stranger.key is not the private key of tls-cert");
  /* a file that is not PEM: a local error naming the option */
  rc = connect_tls(&t, "ca.pem", "notpem.txt", "client.key", &c, err, sizeof err);
  ck_assert_int_eq(rc, DQND_EINVAL);
  ck_assert_msg(strstr(err, "tls-cert") && strstr(err, "not a PEM file"), "%s", err);
  ck_assert_int_eq(stop_daemon(&t.d, SIGTERM), 0);
  rm_rf(t.d.dir);
}
END_TEST

/* dqnd with these options must refuse to start (exit 2) and say `needle` */
static void refuses(const char *const *opts, const char *needle) { refuses_with(opts, needle, 2); }

/* An ipc socket's directory inside a world-writable one (as /tmp, where the
 * last default URL lives) must be a real directory of this user's that only
 * it may write, for the daemon to listen there and for a client to connect:
 * another user could have made it first, to catch the uploads and the token. */
START_TEST(ipc_dir_in_world_writable_refused) {
  char pub[] = "/tmp/dqnd-pub-XXXXXX", sub[300], url[400], real[300], link[300], mine[300];
  ck_assert_ptr_nonnull(mkdtemp(pub));
  ck_assert_int_eq(chmod(pub, 01777), 0);
  snprintf(sub, sizeof sub, "%s/open", pub);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  ck_assert_int_eq(chmod(sub, 0777), 0);
  snprintf(url, sizeof url, "ipc://%s/dqnd.sock", sub);
  const char *a[] = {"--listen", url, NULL};
  refuses_with(a, "writable by others", 1);
  dqnd_client_t *c;
  char err[1400];
  ck_assert_int_ne(dqnd_connect(url, 1000, &c, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "writable by others") != NULL, "%s", err);
  snprintf(real, sizeof real, "%s/real", pub);
  ck_assert_int_eq(mkdir(real, 0700), 0);
  snprintf(link, sizeof link, "%s/link", pub);
  ck_assert_int_eq(symlink(real, link), 0);
  snprintf(url, sizeof url, "ipc://%s/dqnd.sock", link);
  const char *b[] = {"--listen", url, NULL};
  refuses_with(b, "a symbolic link", 1);
  /* a directory further up that others may write (not sticky): refused too */
  char up[300], in[320];
  snprintf(up, sizeof up, "%s/up", pub);
  ck_assert_int_eq(mkdir(up, 0700), 0);
  ck_assert_int_eq(chmod(up, 0777), 0);
  snprintf(in, sizeof in, "%s/in", up);
  ck_assert_int_eq(mkdir(in, 0700), 0);
  snprintf(url, sizeof url, "ipc://%s/dqnd.sock", in);
  const char *u[] = {"--listen", url, NULL};
  refuses_with(u, "/up (on the way to the socket", 1);
  /* one of ours, made by the daemon itself (0750): it listens there */
  snprintf(mine, sizeof mine, "%s/mine", pub);
  snprintf(url, sizeof url, "ipc://%s/dqnd.sock", mine);
  daemon_t d = {0};
  const char *e[] = {"--listen", url, NULL};
  start_daemon_argv(&d, e);
  ck_assert_int_eq(dqnd_connect(url, 5000, &c, err, sizeof err), 0);
  ck_assert_int_eq(dqnd_health(c, NULL, NULL), 0);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
  rm_rf(pub);
}
END_TEST

START_TEST(open_listeners_refused) {
  char port[40];
  snprintf(port, sizeof port, "tcp://0.0.0.0:%d", free_port());
  const char *a[] = {"--listen", port, NULL};
  refuses(a, "nothing checks who connects");
  const char *a2[] = {"--listen", "tcp://127.evil.example:7411", NULL}; /* a host name, not loopback */
  refuses(a2, "nothing checks who connects");
  const char *b[] = {"--listen", "tls+tcp://127.0.0.1:1", NULL};
  refuses(b, "tls-cert: a tls+tcp:// listener needs tls-cert and tls-key");
  const char *c[] = {"--tls-verify-clients", "--listen", "ipc:///tmp/x.sock", NULL};
  refuses(c, "tls-ca");
  const char *d[] = {"--listen", "tls+tcp://127.0.0.1:1", "--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key", NULL};
  refuses(d, "tls-cert: cannot read /nonexistent.pem");
  /* --insecure: it starts, and the log says what that means */
  daemon_t dm = {0};
  const char *e[] = {"--listen", port, "--insecure", NULL};
  start_daemon_argv(&dm, e);
  ck_assert_msg(log_has(&dm, "with --insecure: plain tcp and no auth token"), "the log warns about --insecure");
  ck_assert_int_eq(stop_daemon(&dm, SIGTERM), 0);
  rm_rf(dm.dir);
  /* a token is enough for tcp (the log says it is unencrypted) */
  daemon_t dt = {0};
  const char *f[] = {"--listen", port, "--auth-token", "t0k", NULL};
  start_daemon_argv(&dt, f);
  ck_assert_msg(log_has(&dt, "unencrypted"), "the log says plain tcp is unencrypted");
  ck_assert_int_eq(stop_daemon(&dt, SIGTERM), 0);
  rm_rf(dt.dir);
}
END_TEST

START_TEST(checkpoint_dirs) {
  char extra_dir[] = "/tmp/dqnd-ckdirs-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(extra_dir));
  daemon_t d = {0};
  const char *opts[] = {"--checkpoint-dirs", extra_dir, NULL};
  start_daemon_argv(&d, opts);
  dqnd_client_t *c = connect_to(&d);
  ck_assert_int_eq(dqnd_create_trainer(c, "src", small_fields, N_SMALL, NULL, NULL), 0);
  dqnd_checkpoint_t ck;
  ck_assert_int_eq(dqnd_save_checkpoint(c, "src", 0, &ck), 0);
  /* a copy in a listed directory loads; the same copy elsewhere does not */
  char cmd[4000], in_extra[400], outside[400];
  snprintf(in_extra, sizeof in_extra, "%s/copy.dqnd", extra_dir);
  snprintf(outside, sizeof outside, "%s/copy.dqnd", d.dir);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s' && cp '%s' '%s'", ck.path, in_extra, ck.path, outside);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_msg(dqnd_load_checkpoint_path(c, "fromextra", in_extra, 1, NULL) == 0, "%s", dqnd_last_error(c));
  ck_assert_int_eq(dqnd_load_checkpoint_path(c, "fromoutside", outside, 1, NULL), 7);
  ck_assert_msg(strstr(dqnd_last_error(c), "checkpoint-dirs"), "%s", dqnd_last_error(c));
  /* a directory whose name only starts like the listed one is not inside it */
  char sibling[400];
  snprintf(sibling, sizeof sibling, "%sx", extra_dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/copy.dqnd'", sibling, ck.path, sibling);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "%s/copy.dqnd", sibling);
  ck_assert_int_eq(dqnd_load_checkpoint_path(c, "fromsibling", cmd, 1, NULL), 7);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
  rm_rf(extra_dir);
  rm_rf(sibling);
}
END_TEST

/* the TLS options from a config file (with a comment after a value) */
START_TEST(tls_config_file) {
  daemon_t d = {0};
  snprintf(d.dir, sizeof d.dir, "/tmp/dqnd-sec-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(d.dir));
  char certs[400], conf[400], cmd[600];
  snprintf(certs, sizeof certs, "%s/certs", d.dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", certs);
  ck_assert_int_eq(system(cmd), 0);
  make_certs(certs);
  int port = free_port();
  snprintf(conf, sizeof conf, "%s/dqnd.conf", d.dir);
  /* both listeners in the file: a --listen on the command line would replace them */
  daemon_paths(&d);
  d.listen_in_config = 1;
  FILE *f = fopen(conf, "w");
  fprintf(f, "# TLS from the config file\nlisten = tls+tcp://127.0.0.1:%d   # the network listener\n"
             "listen = %s\ntls-cert = %s/server.pem\ntls-key = %s/server.key  # unencrypted\ntls-ca = %s/ca.pem\n"
             "tls-verify-clients = 1\n",
          port, d.url, certs, certs, certs);
  fclose(f);
  const char *extra[] = {"--config", conf, NULL};
  start_daemon_argv(&d, extra);
  char url[100], ca[500], cert[500], key[500], err[1024];
  snprintf(url, sizeof url, "tls+tcp://localhost:%d", port);
  snprintf(ca, sizeof ca, "%s/ca.pem", certs);
  snprintf(cert, sizeof cert, "%s/client.pem", certs);
  snprintf(key, sizeof key, "%s/client.key", certs);
  dqnd_tls_opts_t o = {.ca = ca, .cert = cert, .key = key};
  dqnd_client_t *c;
  ck_assert_msg(dqnd_connect_tls(url, 5000, &o, &c, err, sizeof err) == 0, "%s", err);
  int serving = 0;
  ck_assert_int_eq(dqnd_health(c, &serving, NULL), 0);
  ck_assert_int_eq(serving, 1);
  dqnd_close(c);
  ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
  rm_rf(d.dir);
}
END_TEST

START_TEST(test_auth_token) {
  /* the token given as --auth-token, then read by --auth-token-file from a
   * file only its owner may read (its first line), so it is not in argv for
   * ps to show; either way a request needs it */
  char tdir[] = "/tmp/dqnd-tok-XXXXXX", tf[200], opt[260]; /* mkdtemp's template */
  ck_assert_ptr_nonnull(mkdtemp(tdir));
  snprintf(tf, sizeof tf, "%s/token", tdir);
  FILE *f = fopen(tf, "w");
  ck_assert(f && fputs("s3cret\nsecond line ignored\n", f) >= 0 && fclose(f) == 0);
  ck_assert_int_eq(chmod(tf, 0600), 0);
  snprintf(opt, sizeof opt, "--auth-token-file=%s", tf);
  const char *how[2][2] = {{"--auth-token", "s3cret"}, {opt, NULL}};
  for (int k = 0; k < 2; k++) {
    daemon_t d = {0};
    start_daemon_args(&d, how[k][0], how[k][1]);
    dqnd_client_t *c = connect_to(&d);
    expect_code(c, dqnd_health(c, NULL, NULL), 16, "auth_token", "no token");
    dqnd_set_token(c, "wrong");
    expect_code(c, dqnd_health(c, NULL, NULL), 16, "auth_token", "wrong token");
    dqnd_set_token(c, "s3cret");
    ck_assert_int_eq(dqnd_health(c, NULL, NULL), 0);
    dqnd_close(c);
    ck_assert_int_eq(stop_daemon(&d, SIGTERM), 0);
    rm_rf(d.dir);
  }
  /* a token file others may read is refused at start, naming the option */
  ck_assert_int_eq(chmod(tf, 0644), 0);
  const char *bad[] = {"--auth-token-file", tf, NULL};
  char want[300];
  snprintf(want, sizeof want, "auth-token-file: %s is readable or writable by group or others", tf);
  refuses_with(bad, want, 2);
  rm_rf(tdir);
}
END_TEST


int main(void) {
  harness_init();
  Suite *s = suite_create("security");
  TCase *tc = tcase_create("security");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_auth_token);
  tcase_add_test(tc, tls_server_only);
  tcase_add_test(tc, tls_mutual);
  tcase_add_test(tc, tls_expired);
  tcase_add_test(tc, tls_config_file);
  tcase_add_test(tc, open_listeners_refused);
  tcase_add_test(tc, ipc_dir_in_world_writable_refused);
  tcase_add_test(tc, checkpoint_dirs);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
