#include "tests/data/check.h"
int main(void) { CHECK_DONE("stub"); }
