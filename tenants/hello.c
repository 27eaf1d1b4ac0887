/* A static glibc hello. */
#include <stdio.h>

int main(int argc, char **argv)
{
	printf("hello, world (%d args)\n", argc);
	return 0;
}
