/*
 * test-utf8.c — utf8_sanitize (daemon/utf8.c) against cases from Markus
 * Kuhn's UTF-8 decoder capability and stress test (UTF-8-test.txt, its
 * section numbers below): well-formed text passes unchanged, and every byte
 * of a malformed sequence becomes '?'.
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

static void same(const char *in, const char *want) {
  char buf[64];
  snprintf(buf, sizeof buf, "%s", in);
  utf8_sanitize(buf);
  ck_assert_msg(strcmp(buf, want) == 0, "'%s' became '%s', want '%s'", in, buf, want);
}

START_TEST(test_well_formed) {
  same("plain ascii", "plain ascii");
  same("\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5", "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"); /* 1 */
  same("\xc2\x80", "\xc2\x80");                 /* 2.1.2 U+0080 */
  same("\xe0\xa0\x80", "\xe0\xa0\x80");         /* 2.1.3 U+0800 */
  same("\xf0\x90\x80\x80", "\xf0\x90\x80\x80"); /* 2.1.4 U+10000 */
  same("\x7f", "\x7f");                         /* 2.2.1 U+007F */
  same("\xdf\xbf", "\xdf\xbf");                 /* 2.2.2 U+07FF */
  same("\xef\xbf\xbf", "\xef\xbf\xbf");         /* 2.2.3 U+FFFF */
  same("\xed\x9f\xbf", "\xed\x9f\xbf");         /* 2.3.1 U+D7FF */
  same("\xee\x80\x80", "\xee\x80\x80");         /* 2.3.2 U+E000 */
  same("\xef\xbf\xbd", "\xef\xbf\xbd");         /* 2.3.3 U+FFFD */
  same("\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf"); /* 2.3.4 U+10FFFF */
}
END_TEST

START_TEST(test_malformed) {
  same("\xf7\xbf\xbf\xbf", "????");     /* 2.2.4 U+1FFFFF: past U+10FFFF */
  same("\xf4\x90\x80\x80", "????");     /* 2.3.5 U+110000 */
  same("\x80", "?");                    /* 3.1.1 a lone continuation byte */
  same("\xbf", "?");                    /* 3.1.2 */
  same("\x80\xbf\x80", "???");          /* 3.1.5 */
  same("\xc0 \xe0 \xf0 ", "? ? ? ");    /* 3.2 lonely start bytes */
  same("\xc0", "?");                    /* 3.3.1 the last byte missing */
  same("\xe0\x80", "??");               /* 3.3.2 */
  same("\xf0\x80\x80", "???");          /* 3.3.3 */
  same("a\xe2\x82", "a??");             /* a character cut at the buffer's end */
  same("\xfe", "?");                    /* 3.5.1 impossible bytes */
  same("\xff", "?");                    /* 3.5.2 */
  same("\xc0\xaf", "??");               /* 4.1.1 overlong '/' */
  same("\xe0\x80\xaf", "???");          /* 4.1.2 */
  same("\xf0\x80\x80\xaf", "????");     /* 4.1.3 */
  same("\xc1\xbf", "??");               /* 4.2.1 the largest overlong of two bytes */
  same("\xe0\x9f\xbf", "???");          /* 4.2.2 */
  same("\xf0\x8f\xbf\xbf", "????");     /* 4.2.3 */
  same("\xed\xa0\x80", "???");          /* 5.1.1 U+D800, a surrogate */
  same("\xed\xbf\xbf", "???");          /* 5.1.7 U+DFFF */
  same("\xed\xa0\x80\xed\xb0\x80", "??????"); /* 5.2.1 a surrogate pair */
  same("ok\xff\xce\xba", "ok?\xce\xba"); /* the rest after a bad byte is read afresh */
}
END_TEST

int main(void) {
  Suite *s = suite_create("utf8");
  TCase *tc = tcase_create("sanitize");
  tcase_add_test(tc, test_well_formed);
  tcase_add_test(tc, test_malformed);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf ? 1 : 0;
}
