# head/embed.cmake — writes the C source of a file's bytes (cmake -DIN=file -DOUT=file.c
# -DNAME=symbol -P embed.cmake): const unsigned char NAME[] (NUL-terminated) and size_t NAME_len.
# The dashboard page (head/dashboard.html) is built into ct-head this way: no file to install.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "/* generated from ${IN} by head/embed.cmake; do not edit */\n"
                    "#include <stddef.h>\n"
                    "const unsigned char ${NAME}[] = {${bytes}0};\n"
                    "const size_t ${NAME}_len = ${len};\n")
