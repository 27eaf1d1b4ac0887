/* mapfile PATH: maps a file privately, closes its descriptor, and prints bytes read through
 * the mapping at a few offsets (the test writes "Mark" at each MiB); then writes to the
 * mapping and checks that the file did not change. Works for files of any size: a big one
 * is populated at first touch, long after the close. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	int fd = open(argv[1], O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0)
		return 3;
	char *p = mmap(0, st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return 4;
	close(fd);
	long mib = st.st_size >> 20;
	for (long i = 0; i < mib; i += mib / 4 ? mib / 4 : 1)
		printf("at %ld MiB: %.4s\n", i, p + (i << 20));
	memcpy(p, "Over", 4);
	fd = open(argv[1], O_RDONLY);
	char b[4];
	if (pread(fd, b, 4, 0) != 4)
		return 5;
	printf("file still says %.4s, mapping says %.4s\n", b, p);
	return 0;
}
