/* main.c - flowengine: the subcommand dispatch. Each command has its folder
 * (gen/, match/, multiply/) over the shared parts (common/) and the project's
 * native library (ntgcore/native/: the pcap reader, flow table, hashes and
 * checksum). */
#include <stdio.h>
#include <string.h>

#include "bigmem.h"
#include "gen/gen_cmd.h"
#include "match/match.h"
#include "multiply/mult_cmd.h"

#define FE_VERSION "0.1.0"

static void usage(FILE *f)
{
    gen_usage(f);
    fputs("       flowengine multiply IN.pcap -o OUT.pcap -T N --ranges CIDR[,...] (see multiply "
          "-h)\n"
          "       flowengine multiply --live IN OUT DUT -T N --ranges CIDR[,...] (see multiply "
          "--live -h)\n"
          "       flowengine match --struct NAME --size N --feed KIND[:ARGS] ... (match --help)\n"
          "       flowengine version\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        puts("flowengine " FE_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "gen"))
        return gen_cmd(argc - 1, argv + 1, usage);
    if (!strcmp(argv[1], "multiply"))
        return mult_cmd(argc - 1, argv + 1);
    if (!strcmp(argv[1], "match"))
        return match_main(argc - 1, argv + 1, bigmem_available());
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "flowengine: unknown subcommand: %s\n", argv[1]);
    usage(stderr);
    return 2;
}
